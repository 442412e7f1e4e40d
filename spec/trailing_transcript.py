"""What the words heard up to a pause say about the turn (B32, B44): the text cues
`semantic_vad` adds to the end-of-turn model's verdict.

The end-of-turn model hears only the sound of the pause. Where a speaker stops after
"Could you tell me the" or "Tell me if", it may still score the pause as finished (it
scored such spliced pauses 0.9 and above), while the words say plainly that the sentence
goes on. So a pause is held, whatever the model says, when the live transcript of the
audio up to it (the partial asked at the pause) ends (`trails_off`)

- with a mark that leaves the sentence open: an ellipsis, a dash, a comma, a semicolon
  or a colon;
- with a word that cannot close an English sentence: an article, a coordinating or a
  clause-introducing conjunction, or a possessive determiner. Prepositions and
  auxiliaries are not on the list: "Is the light on?" and "I know what it is." end
  with them;
- or, when the ASR punctuates what it hears (Whisper does), with no sentence-ending mark
  at all: Whisper leaves a phrase it hears cut off unpunctuated.

The other way round, the model may score a complete question far below a finish (a
pitch-shifted "Is this more orange or more red?" 0.03 at 64 ms of silence, 0.02 at
200 ms), while Whisper's words of the pause already end it with a question mark. Under
eagerness high such words (`closes_question`) end the turn the model holds (B44). Only
the question mark counts: Whisper closes fragments with a period too ("what your country
can do for you," comes back as "What your country can do for you."), so a period, and an
exclamation mark with it, is no evidence that the speaker's sentence closed.

Without a transcript (the ASR offers no partials, an earlier pause's partial was still
running when this pause began, or the words came too late) the verdict is the model's
alone.
"""

from __future__ import annotations

__all__ = ["OPEN_ENDED_WORDS", "closes_question", "trails_off"]

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


def closes_question(text: str, *, punctuated: bool) -> bool:
    """Whether `text`, the words heard up to a pause, closes a question: the ASR
    punctuates (`punctuated`; an ASR that never does says nothing by its marks), the last
    mark before any closing quotes or brackets is a question mark, and the words do not
    trail off ("Can you check if?" is a question mark after an open word). A mark without
    a word before it ("?") closes nothing that was heard."""
    if not punctuated:
        return False
    tail = text.strip().rstrip(_WRAPPERS).rstrip()
    if not tail.endswith("?") or not any(c.isalnum() for c in tail):
        return False
    return not trails_off(text, punctuated=punctuated)
