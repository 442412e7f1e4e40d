"""`TurnTaking`: who has the floor, from the VAD's scores (B10, B32, B33).

What it owns: the `TurnDetector` (server VAD segmentation, and the pauses `semantic_vad`
puts under review), the `LiveTranscript` (partials of the utterance being spoken), and
the two decisions that join them:

- **The verdict waits for the pause's words** (B32). A pause under review asks the
  end-of-turn model and, just before, a partial of the same audio. A verdict that comes
  back before the partial is held until the partial answers, at most until the verdict's
  own budget (`turn_end_budget_ms`, counted from the review) runs out on the session
  clock; then it is applied with the partial's words (a finishing verdict whose words
  trail off holds the pause; under eagerness high a holding one whose words close a
  question finishes it, B44), or without words. A verdict that carries its own words is
  applied with them at once.
- **A commit's ASR reuses the partial that heard its audio** (B33, D41). When the audio
  and language of a commit's `SubmitAsr` are those of the latest partial, or the commit
  is the one the detector made in the pause that partial was asked in, with no speech
  scored since (its audio then differs from the partial's only by the pause's silence),
  the partial's text is the transcript: at once when it has answered, else when it does;
  only a partial that failed sends the `SubmitAsr`. Under manual turns (push-to-talk,
  B41) each append's speech verdict plays the VAD's part: a hold is transcribed while
  held, and the client's commit of a hold that went quiet after a pause's partial takes
  its words (D44).

The session drives it the way h11's `Connection` drives its `ConnectionState`: it hands
over VAD scores, partials, verdicts and the clock, and is called back to barge in
(`interrupt`) and to commit an utterance that ended (`end_turn`). Transcripts it decides
on go back through `settled`, which the session applies as stage results once the event
that led to them is done.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.audio import AudioClock
from core.live_transcript import AskedPartial, LiveTranscript
from core.statemachines.turn_detector import TurnDetector
from spec.effects import TURN_END_WINDOW_MS
from spec.session_config import SEMANTIC_PAUSE_MS
from spec.stage_results import AsrTranscript
from spec.tables.turn_detector import FRAME_MS
from spec.trailing_transcript import closes_question, trails_off

if TYPE_CHECKING:
    from collections.abc import Callable

    from core.outbox import Outbox
    from core.statemachines.input_buffer import InputBuffer
    from core.statemachines.turn_detector import TurnEnd
    from spec.effects import SubmitAsr
    from spec.session_config import SessionConfig, TurnDetection
    from spec.stage_results import AsrPartial, TurnEndVerdict

__all__ = ["ASR_TAIL_PAD_MS", "TurnTaking"]

#: trailing silence kept on a VAD-ended utterance for the ASR (the rest only ended the turn)
ASR_TAIL_PAD_MS = 200


@dataclass(frozen=True, slots=True)
class _HeldVerdict:
    """A verdict on the pause under review that waits for the pause's words."""

    request_id: str
    probability: float
    partial_request_id: str
    deadline_ms: int


class TurnTaking:
    __slots__ = (
        "_asked_for_review",
        "_asr_wanted",
        "_buffer",
        "_clock",
        "_config",
        "_end_turn",
        "_held",
        "_interrupt",
        "_out",
        "_preempt",
        "_preempting",
        "_speech_went_on",
        "_waiting_asr",
        "detector",
        "live",
        "punctuated",
        "settled",
        "turn_end_budget_ms",
    )

    def __init__(
        self,
        out: Outbox,
        buffer: InputBuffer,
        clock: AudioClock,
        *,
        config: Callable[[], SessionConfig],
        interrupt: Callable[[], None],
        end_turn: Callable[[TurnDetection, str, int], None],
        asr_wanted: Callable[[str], bool],
        preempt: Callable[[str, str], bool],
        speech_went_on: Callable[[], None],
        live_transcripts: bool,
        punctuated: bool,
        turn_end_budget_ms: int,
    ) -> None:
        self._out = out
        self._buffer = buffer
        self._clock = clock
        self._config = config
        self._interrupt = interrupt  # barge in on the active response (B11)
        self._end_turn = end_turn  # commit the utterance: (config, item id, keep until)
        self._asr_wanted = asr_wanted  # whether a response still waits for this ASR
        #: a pause's words are in: prepare the reply (utterance, words); whether it did
        self._preempt = preempt
        self._speech_went_on = speech_went_on  # drop the reply prepared at the pause
        self._preempting = False  # a reply is being prepared for the current pause
        self.detector = TurnDetector(out)
        self.live = LiveTranscript(out)
        self.live.enabled = live_transcripts
        self.punctuated = punctuated  # the ASR ends sentences with a mark (B32)
        self.turn_end_budget_ms = turn_end_budget_ms
        #: the pause under review: (its verdict's request id, its partial's, asked at)
        self._asked_for_review: tuple[str, str | None, int] | None = None
        self._held: _HeldVerdict | None = None
        #: commits' ASR waiting for the partial that heard their audio (partial id, effect)
        self._waiting_asr: list[tuple[str, SubmitAsr]] = []
        #: transcripts decided here, for the session to apply as stage results
        self.settled: list[AsrTranscript] = []

    @property
    def _pause_partial(self) -> str | None:
        """The partial asked in the current pause of the utterance, if one was: the
        latest, a pause's, with no speech scored since (D41)."""
        latest = self.live.latest
        if self.live.item_id is None or latest is None or not (latest.pause and latest.quiet):
            return None
        return latest.request_id

    # --- the session's calls --------------------------------------------------------------

    def reset(self, *, restart: bool = False) -> None:
        """A commit, a clear or a new `turn_detection`: the detector starts over (nothing
        before now may start speech; `restart`: the scores start over too) and the
        utterance being spoken ends."""
        self.detector.reset(self._clock.samples, restart=restart)
        self.live.end()

    def end_utterance(self) -> None:
        """A commit: the utterance it holds is no longer spoken."""
        if self.detector.speaking:
            self.detector.reset(self._clock.samples)
        self.live.end()

    def deadlines(self) -> list[int | None]:
        held = self._held
        valid = held is not None and held.request_id == self.detector.turn_end_id
        return [self.detector.deadline_ms, held.deadline_ms if valid and held else None]

    def on_timeout(self, now_ms: int) -> None:
        config = self._config().turn_detection
        held = self._held
        if held is not None and now_ms >= held.deadline_ms:
            self._held = None
            # the words did not come within the verdict's budget: the verdict alone
            self._apply_verdict(held.request_id, held.probability, None, False, now_ms)
        if config is not None and self.detector.overdue(now_ms):
            self._stop(config, "time_out")

    def buffered_bytes_before(self, until_sample: int) -> int:
        """Bytes of the buffered audio before `until_sample` (it ends at the audio clock)."""
        start = self._clock.samples - AudioClock.samples_of_bytes(self._buffer.audio_bytes)
        return AudioClock.bytes_of_samples(max(0, until_sample - start))

    # --- VAD scores -----------------------------------------------------------------------

    def on_vad_scores(
        self, probabilities: tuple[float, ...], now_ms: int, levels: tuple[float, ...] = ()
    ) -> None:
        config = self._config().turn_detection
        if config is None:
            return
        detector = self.detector
        for n, probability in enumerate(probabilities):
            if self._out.closed:
                return
            level = levels[n] if n < len(levels) else None
            boundary = detector.feed(probability, config, level)
            if detector.spoken:
                # speech: the latest partial's audio is no longer all that was said, and a
                # later pause asks its own (D41); a frame below the utterance's floor is
                # not speech, whatever Silero's lag calls it (B43)
                self.live.speech_scored()
            if self._preempting and detector.spoken and detector.speaking:
                # speech after the pause whose words the prepared reply answers (B35)
                self._preempting = False
                self._speech_went_on()
            if boundary == "start":
                item_id = self._out.next_id("item")
                detector.start(item_id=item_id, audio_start_ms=detector.start_ms(config))
                self._buffer.speech_item_id = item_id
                if not self._buffer.capturing:
                    self._buffer.start_capture()
                self.live.begin(item_id, detector.end_sample())
                if config.interrupt_response:
                    self._interrupt()
            elif boundary in ("pause", "review_again"):
                # the pause's words, transcribed since its first silent frame, go with the
                # verdict: the reply then need not wait for an ASR after the verdict, and
                # words that trail off can hold the pause
                self._ask_partial()
                self._review_pause(config, now_ms, again=boundary == "review_again")
            elif boundary == "fade":
                # the speech's energy fell: its pause's words now, not after Silero's lag;
                # their answer may start the reply (B43)
                detector.fade()
                self._ask_partial()
            elif boundary == "resume":
                detector.resume()
            elif boundary in ("stop", "time_out"):
                self._stop(config, boundary)
            elif detector.speaking:
                # live transcripts: the pause's as its silence begins, else the cadence's
                self._ask_partial()

    def _stop(self, config: TurnDetection, trigger: TurnEnd) -> None:
        """Speech stopped: the session commits the utterance (or says why not)."""
        # ASR need not hear the silence that only ended the turn: keep a short tail
        detector = self.detector
        keep_until = detector.silence_start + AudioClock.samples_of_ms(ASR_TAIL_PAD_MS)
        if self._pause_partial is not None:
            # the commit holds this pause's partial's audio but for silence (D41)
            self.live.turn_ended(self._buffer.audio()[: self.buffered_bytes_before(keep_until)])
        item_id = detector.stop(trigger)
        self._preempting = False  # the turn ended in the pause: its commit decides (B35)
        self.live.end()
        self._end_turn(config, item_id, keep_until)

    # --- semantic VAD (B32) ---------------------------------------------------------------

    def _review_pause(self, config: TurnDetection, now_ms: int, *, again: bool) -> None:
        """A pause in speech: ask the end-of-turn model about the utterance so far, with
        the words of the pause's partial if it has one (`again`: a held pause, once more)."""
        policy = config.end_of_turn
        assert policy is not None  # the detector pauses only under semantic_vad
        detector = self.detector
        unscored = AudioClock.bytes_of_samples(max(0, self._clock.samples - detector.end_sample()))
        pcm16 = self._buffer.audio_tail(
            AudioClock.bytes_of_ms(TURN_END_WINDOW_MS), drop_bytes=unscored
        )
        request_id = self._out.next_id("turn")
        partial_id = self._pause_partial
        if again:
            detector.review_again(request_id=request_id, pcm16=pcm16, partial_request_id=partial_id)
        else:
            detector.pause(
                request_id=request_id,
                pcm16=pcm16,
                now_ms=now_ms,
                max_wait_ms=policy.max_wait_ms,
                partial_request_id=partial_id,
            )
        self._asked_for_review = (request_id, partial_id, now_ms)

    def on_verdict(self, result: TurnEndVerdict, now_ms: int) -> None:
        """A verdict on the pause under review; any other is stale (D33)."""
        if result.request_id != self.detector.turn_end_id or self._config().turn_detection is None:
            return
        review = self._asked_for_review
        partial_id = review[1] if review is not None and review[0] == result.request_id else None
        if result.transcript is None and result.probability is not None and partial_id:
            heard = self.live.asked(partial_id)
            if heard is not None and not heard.answered:
                assert review is not None
                deadline = review[2] + self.turn_end_budget_ms
                if now_ms < deadline:  # the words may still come in time: wait for them
                    self._held = _HeldVerdict(
                        result.request_id, result.probability, partial_id, deadline
                    )
                    return
            if heard is not None and heard.answered:
                self._apply_verdict(
                    result.request_id, result.probability, heard.text, self.punctuated, now_ms
                )
                return
        self._apply_verdict(
            result.request_id, result.probability, result.transcript, result.punctuated, now_ms
        )

    def _apply_verdict(
        self,
        request_id: str,
        probability: float | None,
        transcript: str | None,
        punctuated: bool,
        now_ms: int,
    ) -> None:
        config = self._config().turn_detection
        detector = self.detector
        policy = config.end_of_turn if config is not None else None
        if config is None or policy is None or request_id != detector.turn_end_id:
            return
        finished = probability is not None and probability >= policy.threshold
        if finished and transcript is not None:
            # the model hears only the sound of the pause; words that cannot close a
            # sentence ("... bigger than") say the speaker is not done
            finished = not trails_off(transcript, punctuated=punctuated)
        elif probability is not None and transcript is not None and policy.questions_finish:
            # an eager detector takes a question the words close for a finish the model
            # missed (B44); without a verdict the pause waits as server VAD's would (D33)
            finished = closes_question(transcript, punctuated=punctuated)
        if finished and detector.silence_frames * FRAME_MS >= SEMANTIC_PAUSE_MS:
            self._stop(config, "finish")
            return
        if finished:
            # an eager review's "finished" waits out the model's own pause length: speech
            # that resumes inside it was a comma, not an end (D43)
            wait = SEMANTIC_PAUSE_MS
        else:
            wait = policy.max_wait_ms if probability is not None else config.silence_duration_ms
        detector.hold(wait_ms=wait, now_ms=now_ms)
        if detector.overdue(now_ms):
            self._stop(config, "time_out")

    # --- live transcripts (B33) -----------------------------------------------------------

    def _ask_partial(self) -> None:
        """A live transcript of the utterance so far, all that was scored: the pause's
        partial on a silent frame of a pause that has none yet (D41), else the cadence's."""
        detector = self.detector
        pause = detector.silence_frames > 0 or detector.fading
        if pause and self._pause_partial is not None:
            return  # this pause has its partial
        at = detector.end_sample()
        if not self.live.due(at, pause=pause):
            return
        audio = self._buffer.audio()[: self.buffered_bytes_before(at)]
        self.live.ask(audio, self._config().transcription_language, at, pause=pause)

    # --- live transcripts of a manual turn (B41) ------------------------------------------

    def on_manual_append(self, *, speech: bool) -> None:
        """An append under manual turns (`turn_detection` null: the client's push-to-talk),
        buffered, with its speech verdict: the hold is transcribed while it is held, as
        VAD speech is (B41). Its first speech names its item (the live text's); the first
        quiet append after speech asks the pause's partial, with all the audio buffered,
        else the cadence asks one."""
        live = self.live
        if not live.enabled or not self._buffer.capturing:
            return
        at = self._clock.samples
        if speech:
            live.speech_scored()  # the latest partial's audio is no longer all that was said
        if live.item_id is None:
            item_id = self._buffer.speech_item_id or self._out.next_id("item")
            self._buffer.speech_item_id = item_id
            live.begin(item_id, at)
            return
        pause = not speech
        if pause and self._pause_partial is not None:
            return  # this quiet run has its partial
        if live.due(at, pause=pause):
            live.ask(self._buffer.audio(), self._config().transcription_language, at, pause=pause)

    def manual_commit(self) -> None:
        """The client commits a manual turn: when it holds the audio of the latest pause's
        partial and, after it, only appends judged quiet, that partial's words are its
        transcript (B41, D44)."""
        if self._pause_partial is not None:
            self.live.turn_ended(self._buffer.audio())

    def on_partial(self, result: AsrPartial, now_ms: int) -> None:
        asked = self.live.in_flight
        heard = self.live.asked(result.request_id)
        # a pause's words, for the utterance still being spoken, and all that was said (no
        # speech scored since they were asked): a reply may start (B35)
        pause = asked is not None and asked[0] == result.request_id and asked[2]
        still = heard is not None and heard.quiet
        utterance = asked[1] if pause and still and asked is not None else None
        self.live.on_partial(result)
        held = self._held
        if held is not None and held.partial_request_id == result.request_id:
            self._held = None
            self._apply_verdict(
                held.request_id, held.probability, result.text, self.punctuated, now_ms
            )
        waiting = [w for w in self._waiting_asr if w[0] == result.request_id]
        self._waiting_asr = [w for w in self._waiting_asr if w[0] != result.request_id]
        for _, submit in waiting:
            self._answer_asr(submit, result.text)
        words = result.text
        if utterance is not None and utterance == self.live.item_id and words:
            self._preempting = self._preempt(utterance, words)

    def transcribe(self, submit: SubmitAsr) -> None:
        """A commit's ASR: answered by the partial that heard the same audio, if one did
        (at once, or when it answers), else sent to the backend."""
        heard: AskedPartial | None = self.live.heard(submit.pcm16, submit.language)
        if heard is None:
            self._out.effect(submit)
        elif heard.answered:
            self._answer_asr(submit, heard.text)
        else:
            self._waiting_asr.append((heard.request_id, submit))

    def _answer_asr(self, submit: SubmitAsr, text: str | None) -> None:
        if text is not None:
            self.settled.append(AsrTranscript(submit.request_id, text))
        elif self._asr_wanted(submit.request_id):  # the partial failed: transcribe after all
            self._out.effect(submit)
