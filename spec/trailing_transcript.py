"""Whether the words heard up to a pause trail off (B32): the text cue `semantic_vad` adds
to the end-of-turn model's verdict.

The end-of-turn model hears only the sound of the pause. Where a speaker stops after
"Could you tell me the" or "Tell me if", it may still score the pause as finished (it
scored such spliced pauses 0.9 and above), while the words say plainly that the sentence
goes on. So a pause is held, whatever the model says, when the live transcript of the
audio up to it (the partial asked at the pause) ends

- with a mark that leaves the sentence open: an ellipsis, a dash, a comma, a semicolon
  or a colon;
- with a word that cannot close an English sentence: an article, a coordinating or a
  clause-introducing conjunction, or a possessive determiner. Prepositions and
  auxiliaries are not on the list: "Is the light on?" and "I know what it is." end
  with them;
- or, when the ASR punctuates what it hears (Whisper does), with no sentence-ending mark
  at all: Whisper leaves a phrase it hears cut off unpunctuated.

The cue only ever holds a pause; it never ends a turn the model holds, and without a
transcript (the ASR offers no partials, an earlier pause's partial was still running when
this pause began, or the words came too late) the verdict is the model's alone.
"""

from __future__ import annotations

__all__ = ["OPEN_ENDED_WORDS", "trails_off"]

#: words after which an English sentence must go on
OPEN_ENDED_WORDS = frozenset(
    {
        # articles
        "a",
        "an",
        "the",
        # coordinating conjunctions
        "and",
        "or",
        "but",
        "nor",
        # conjunctions that introduce a clause or a comparison
        "if",
        "whether",
        "because",
        "than",
        # possessive determiners that are never pronouns
        "my",
        "your",
        "our",
        "their",
    }
)
_OPEN_MARKS = ("...", "\u2026", "-", "\u2013", "\u2014", ",", ";", ":")
_CLOSING_MARKS = (".", "?", "!")
#: quotes and brackets that may follow a sentence's last mark
_WRAPPERS = "\"')]}\u201d\u2019"


def trails_off(text: str, *, punctuated: bool) -> bool:
    """Whether `text`, the words heard up to a pause, leaves its sentence open;
    `punctuated`: the ASR ends what it hears as a sentence with `.`, `?` or `!`."""
    tail = text.strip().rstrip(_WRAPPERS).rstrip()
    if not tail:
        return False  # nothing heard: no evidence either way
    if tail.endswith(_OPEN_MARKS):
        return True
    written = tail.split()[-1].strip("".join(_CLOSING_MARKS) + _WRAPPERS + "(")
    # a capital "A" is the letter ("option A."), not the article
    if written != "A" and written.lower() in OPEN_ENDED_WORDS:
        return True
    return punctuated and not tail.endswith(_CLOSING_MARKS)
