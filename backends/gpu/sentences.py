"""Cut streamed reply text into sentences for the TTS stage.

TTS speaks a sentence as soon as it is complete, so the first audio does not wait for
the whole reply. A sentence ends at `.`, `!`, `?` or `…` (with any closing quotes or
brackets) followed by whitespace, or at a CJK full stop (U+3002, U+FF01, U+FF1F) at once. Common
abbreviations ("e.g.", "Dr.") and single initials do not end a sentence; decimals never
do (no whitespace after the dot). A run longer than `max_chars` without an end is cut
at its last comma or space, so latency stays bounded. With `first_clause_chars`, the first
piece already ends at a clause end (`,` `;` `:` or a dash between spaces) once it is that
long, so the first audio waits for a clause, not a sentence (as the core's cutting does).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["SentenceCutter", "split_sentences"]

_CLOSERS: Final = "\"'\u201d\u2019)\\]\uff09\u300d"  # quotes and brackets that may follow the end
_END: Final = re.compile(
    "([.!?\u2026]+[" + _CLOSERS + "]*)(\\s+)|([\u3002\uff01\uff1f]+[" + _CLOSERS + "]*)"
)
_CLAUSE_END: Final = re.compile("[,;:][" + _CLOSERS + "]*\\s+|\\s[-\u2013\u2014]\\s+")
_ABBREVIATIONS: Final = frozenset(
    {"mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "no", "approx"}
)


def _is_abbreviation(text: str, dot_at: int) -> bool:
    if text[dot_at] != ".":
        return False
    start = dot_at
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    word = text[start:dot_at].lower().lstrip("(\"'“")
    return word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha())


class SentenceCutter:
    """Feed text deltas; take complete sentences out as they appear."""

    __slots__ = ("_buffer", "_first", "first_clause_chars", "max_chars", "min_chars")

    def __init__(
        self, *, min_chars: int = 1, max_chars: int = 240, first_clause_chars: int = 0
    ) -> None:
        self._buffer = ""
        self._first = True  # no piece was taken out yet
        self.min_chars = min_chars  # shorter sentences wait to be joined with the next
        self.max_chars = max_chars
        self.first_clause_chars = first_clause_chars  # 0: the first piece is a sentence too

    def _first_clause(self) -> str | None:
        """The first piece, cut at a clause end once it is long enough (None: not yet)."""
        if not self._first or not self.first_clause_chars:
            return None
        sentence = _END.search(self._buffer)
        for clause in _CLAUSE_END.finditer(self._buffer):
            if sentence is not None and clause.start() >= sentence.start():
                return None
            piece = self._buffer[: clause.end()].strip()
            if len(piece) >= self.first_clause_chars:
                self._buffer = self._buffer[clause.end() :]
                return piece
        return None

    def feed(self, delta: str) -> list[str]:
        """Add text; return the sentences it completed (stripped, non-empty)."""
        self._buffer += delta
        out: list[str] = []
        if (clause := self._first_clause()) is not None:
            out.append(clause)
        pos = 0
        search_from = 0
        while True:
            match = _END.search(self._buffer, search_from)
            if match is None:
                break
            if match.group(1) is not None:
                end = match.end(1)
                if _is_abbreviation(self._buffer, match.start(1)) and match.group(1) == ".":
                    search_from = match.end()
                    continue
                resume = match.end()
            else:
                end = resume = match.end()
            sentence = self._buffer[pos:end].strip()
            if len(sentence) >= self.min_chars and sentence:
                out.append(sentence)
                pos = resume
            search_from = resume
        self._buffer = self._buffer[pos:]
        self._first = self._first and not out
        while len(self._buffer) > self.max_chars:
            cut = max(
                self._buffer.rfind(", ", 0, self.max_chars),
                self._buffer.rfind(" ", 0, self.max_chars),
            )
            cut = cut + 1 if cut > 0 else self.max_chars
            piece = self._buffer[:cut].strip()
            if piece:
                out.append(piece)
            self._buffer = self._buffer[cut:]
        return out

    def flush(self) -> str:
        """The unfinished rest (end of the reply); '' when nothing is left."""
        rest = self._buffer.strip()
        self._buffer = ""
        return rest


def split_sentences(text: str, *, max_chars: int = 240) -> list[str]:
    """All sentences of a complete text."""
    cutter = SentenceCutter(max_chars=max_chars)
    sentences = cutter.feed(text)
    rest = cutter.flush()
    return [*sentences, rest] if rest else sentences
