"""Where reply text is cut for speech: the one sentence grammar of the server.

A sentence ends at `.`, `!` or `?`, optionally followed by closing quotes or brackets,
then whitespace; the reply's first piece may end earlier, at a clause end (`,` `;` `:`
with closers, or a dash between spaces, then whitespace) once it holds
`FIRST_CLAUSE_MIN_CHARS`, so the first audio waits for a clause, not a sentence
(docs/session-semantics.md section 3). The core cuts the streamed reply with `next_cut`
into TTS requests; a TTS stage that synthesizes sentence by sentence splits a request's
text with `split_sentences`, by the same rule. The reference model keeps its own,
independently written cutter: it is the oracle this one is tested against.
"""

from __future__ import annotations

import re
from typing import Final

from spec.tables.response import FIRST_CLAUSE_MIN_CHARS

__all__ = ["next_cut", "reply_rest", "split_sentences", "take_pieces"]

_SENTENCE_END: Final = re.compile(r"[.!?][\"')\]]*\s+")
_CLAUSE_END: Final = re.compile(r"[,;:][\"')\]]*\s+|\s[-\u2013\u2014]\s+")


def next_cut(text: str, *, first: bool) -> int | None:
    """Where the next piece of `text` ends (None: no end yet): after a sentence end; for
    the reply's first piece (`first`), after an earlier clause end once the piece has
    `FIRST_CLAUSE_MIN_CHARS`."""
    sentence = _SENTENCE_END.search(text)
    cut = sentence.end() if sentence is not None else None
    if first:
        for clause in _CLAUSE_END.finditer(text):
            if cut is not None and clause.end() >= cut:
                break
            if len(text[: clause.end()].strip()) >= FIRST_CLAUSE_MIN_CHARS:
                return clause.end()
    return cut


def take_pieces(text: str, *, first: bool) -> tuple[list[str], str]:
    """The pieces of streamed reply text ready for TTS, and the text still waiting for
    an end (`first`: no piece of this reply was taken yet)."""
    pieces: list[str] = []
    while (end := next_cut(text, first=first and not pieces)) is not None:
        piece = text[:end].strip()
        text = text[end:]
        if piece:
            pieces.append(piece)
    return pieces, text


def reply_rest(pending: str, decided: str, *, streamed: bool) -> str:
    """What of a reply is left to speak when the VLM decides: the streamed text not yet
    cut into pieces; the decision's own text only when nothing was streamed."""
    return (pending if streamed else decided).strip()


def split_sentences(text: str) -> list[str]:
    """`text` as its sentences, whitespace runs made one space (the last may lack an end)."""
    rest = " ".join(text.split())
    sentences: list[str] = []
    while (end := next_cut(rest, first=False)) is not None:
        sentences.append(rest[:end].strip())
        rest = rest[end:]
    if rest:
        sentences.append(rest)
    return sentences
