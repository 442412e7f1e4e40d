"""`LiveTranscript`: the text of an utterance while the person is still speaking (B33).

Under server VAD, when the backend's ASR offers it, the session asks for a partial
transcription of the growing utterance (`SubmitPartialAsr`):

- at a pause: on the first frame of a silence run after speech (the first frame the VAD
  scores below the threshold), with the audio scored up to there: all the speech the
  utterance's commit will hold if the turn ends in this pause, asked as early as it can
  be, so its words are in when the turn ends (D41). A pause asks one partial; when
  another pause's partial is still out, the pause asks on a later frame of its silence,
  once that one answered;
- on a cadence while speech goes on: once the VAD scored `CADENCE_MS` of audio since the
  last one (or since speech started), with the audio up to there.

It stays cheap and bounded: one partial at a time, and one that falls due on the cadence
while another runs is skipped. A pause's partial is not: it supersedes a cadence partial
still out (whose answer is then dropped), because the pause's words are what the
end-of-turn review reads and what a commit in that pause reuses. A pause never supersedes
a pause's partial, so at most two are ever out. A partial's words become
`conversation.item.input_audio_transcription.delta` events, only the words beyond those
already sent (live text only grows; the `completed` event, from the final transcription,
is the item's text and replaces it). A partial that answers after its utterance ended
(committed, cleared, detector reset) or failed sends no words.

The latest partial asked is remembered with its audio, language and, once it answered,
its text (`AskedPartial`), also after its utterance ended: what `core.turn_taking` reads
for the verdict of its pause and for a commit of its audio. A pause's partial also keeps
whether speech was scored after it (`quiet`) and, when the turn ended in its pause, that
commit's audio (`turn_audio`): it holds the partial's audio and only the pause's silence
beyond it (or less of that silence), so the partial's words are its transcript (D41).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from spec.effects import LIVE_CADENCE_MS, SubmitPartialAsr
from spec.events import InputAudioTranscriptionDelta

if TYPE_CHECKING:
    from core.outbox import Outbox
    from spec.stage_results import AsrPartial

__all__ = ["CADENCE_MS", "AskedPartial", "LiveTranscript"]

#: while speech goes on, a partial at most this often (of scored audio, not wall clock)
CADENCE_MS = LIVE_CADENCE_MS
_CADENCE_SAMPLES = CADENCE_MS * 16


@dataclass(slots=True)
class AskedPartial:
    """A partial asked: its audio and language, and its answer once it came (text None:
    it failed). A pause's partial (`pause`) also keeps whether no speech was scored after
    its audio (`quiet`) and whether the turn ended in its pause (`ended_turn`)."""

    request_id: str
    pcm16: bytes
    language: str | None
    answered: bool = False
    text: str | None = None
    pause: bool = False
    quiet: bool = True
    #: the audio of the commit the detector made in this partial's pause (D41)
    turn_audio: bytes | None = None


class LiveTranscript:
    __slots__ = (
        "_count",
        "_out",
        "asked_at",
        "enabled",
        "in_flight",
        "item_id",
        "latest",
        "sent_words",
    )

    def __init__(self, outbox: Outbox) -> None:
        self._out = outbox
        self.enabled = False  # the runtime turns it on when its ASR offers partials
        self.item_id: str | None = None  # the utterance being spoken
        #: (request id, its utterance, whether it was asked at a pause)
        self.in_flight: tuple[str, str, bool] | None = None
        self.sent_words = 0
        self.asked_at = 0  # the session audio clock (samples) when the last one was asked
        self.latest: AskedPartial | None = None  # the last partial asked
        self._count = 0

    def begin(self, item_id: str, at_sample: int) -> None:
        """Speech started (VAD scored up to `at_sample`): a new utterance, nothing sent."""
        self.item_id = item_id
        self.sent_words = 0
        self.asked_at = at_sample

    def end(self) -> None:
        """The utterance ended (commit, clear, reset): a partial still out is dropped."""
        self.item_id = None

    def due(self, at_sample: int, *, pause: bool) -> bool:
        """Whether to ask for a partial now that the VAD scored up to `at_sample` (the
        caller says whether this frame makes a pause)."""
        if not self.enabled or self.item_id is None:
            return False
        if self.in_flight is not None:
            return pause and not self.in_flight[2]  # a pause supersedes the cadence
        return pause or at_sample - self.asked_at >= _CADENCE_SAMPLES

    def ask(self, pcm16: bytes, language: str | None, at_sample: int, *, pause: bool) -> str:
        """Ask for a partial of `pcm16` (at a pause or on the cadence); returns its
        request id. One still out is superseded: its answer will be dropped."""
        assert self.item_id is not None  # `due` said so
        self._count += 1
        request_id = f"live:{self._count}"
        self.in_flight = (request_id, self.item_id, pause)
        self.asked_at = at_sample
        self.latest = AskedPartial(request_id, pcm16, language, pause=pause)
        self._out.effect(SubmitPartialAsr(request_id, self.item_id, pcm16, language))
        return request_id

    def asked(self, request_id: str) -> AskedPartial | None:
        """The partial `request_id`, if it is the latest asked."""
        latest = self.latest
        return latest if latest is not None and latest.request_id == request_id else None

    def speech_scored(self) -> None:
        """The VAD scored a frame of speech: the latest partial's audio is no longer all
        the speech there is."""
        if self.latest is not None:
            self.latest.quiet = False

    def turn_ended(self, audio: bytes) -> None:
        """The detector ended the turn, committing `audio`: in the pause of the latest
        partial, if that is a pause's partial no speech came after and `audio` differs
        from its audio only by that pause's silence (one a prefix of the other; D41)."""
        latest = self.latest
        if latest is None or not latest.pause or not latest.quiet:
            return
        if audio.startswith(latest.pcm16) or latest.pcm16.startswith(audio):
            latest.turn_audio = audio

    def heard(self, pcm16: bytes, language: str | None) -> AskedPartial | None:
        """The latest partial, if it heard this audio in this language: exactly its own
        audio, or the audio of the turn that ended in its pause (D41)."""
        latest = self.latest
        if latest is None or latest.language != language:
            return None
        if pcm16 in (latest.pcm16, latest.turn_audio):
            return latest
        return None

    def on_partial(self, result: AsrPartial) -> None:
        latest = self.latest
        if latest is not None and latest.request_id == result.request_id:
            latest.answered, latest.text = True, result.text
        if self.in_flight is None or self.in_flight[0] != result.request_id:
            return  # superseded by a pause's partial
        _, item_id, _ = self.in_flight
        self.in_flight = None
        if item_id != self.item_id or result.text is None:
            return  # its utterance ended meanwhile, or it failed
        words = result.text.split()
        new = words[self.sent_words :]
        if not new:
            return
        delta = " ".join(new)
        if self.sent_words:
            delta = " " + delta
        self.sent_words = len(words)
        self._out.emit(InputAudioTranscriptionDelta(item_id=item_id, delta=delta))
