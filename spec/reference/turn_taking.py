"""The oracle's turn-taking: server VAD, semantic VAD's turn-end verdicts and the words
that finish one, live transcripts and the fade (docs/session-semantics.md sections 5 -
5.5).
"""

from __future__ import annotations

from dataclasses import replace

from spec.effects import (
    LIVE_CADENCE_MS,
    TURN_END_WINDOW_MS,
    SubmitPartialAsr,
    SubmitTurnEnd,
)
from spec.errors import ErrorCode
from spec.events import (
    InputAudioBufferCleared,
    InputAudioBufferSpeechStarted,
    InputAudioBufferSpeechStopped,
    InputAudioTranscriptionDelta,
)
from spec.reference.endings import ResponseEndings
from spec.reference.records import (
    ASR_TAIL_MS,
    VAD_FRAME_MS,
    _Buffer,
)
from spec.session_config import (
    SEMANTIC_PAUSE_MS,
)
from spec.stage_results import (
    AsrPartial,
    AsrTranscript,
    TurnEndVerdict,
    VadScores,
)
from spec.trailing_transcript import closes_question, trails_off
from spec.turn_detection import FADE_DB, FADE_FRAMES, PAUSE_CLOCK_MARGIN_MS

__all__ = [
    "TurnTaking",
]


class TurnTaking(ResponseEndings):
    """Turn-taking: server VAD, semantic VAD, live transcripts."""

    # --- server VAD (section 5) --------------------------------------------------------

    def _on_vad_scores(self, scores: VadScores) -> None:
        td = self.config.turn_detection
        if td is None:
            # AMBIGUITY (docs/session-semantics.md, decision D23): scores arriving while VAD
            # is off are dropped
            return
        vad = self.vad
        frame = VAD_FRAME_MS * 16  # samples
        low = max(td.threshold - 0.15, 0.01)
        min_speech = max(td.min_speech_duration_ms, VAD_FRAME_MS)
        for n, p in enumerate(scores.probabilities):
            vad = self.vad  # a commit or barge-in below may replace the detector
            start = vad.origin + frame * vad.frames_seen
            vad.frames_seen += 1
            level = scores.levels[n] if n < len(scores.levels) else None
            if vad.state == "silence" and (p < td.threshold or vad.high_run == 0):
                vad.peak_db = None  # section 5.4: each run of speech measures its own
            if p >= td.threshold and level is not None:
                vad.peak_db = level if vad.peak_db is None else max(vad.peak_db, level)
            # section 5.4: a frame FADE_DB below the utterance's loudest is no speech,
            # whatever its probability
            quiet = level is not None and vad.peak_db is not None and level < vad.peak_db - FADE_DB
            spoken = p >= td.threshold and not quiet
            if vad.state != "silence":
                vad.quiet_run = vad.quiet_run + 1 if quiet else 0
            fades = vad.state == "speech" and vad.quiet_run >= FADE_FRAMES
            if spoken:
                self.live.last_quiet = False  # D41: speech after the latest partial's audio
            if vad.state == "silence":
                if p >= td.threshold:
                    if vad.high_run == 0:
                        vad.high_start = start
                    vad.high_run += 1
                    if vad.high_run * VAD_FRAME_MS >= min_speech:
                        begin = max(vad.high_start - td.prefix_padding_ms * 16, vad.reset_at)
                        self._speech_started(begin / 16)
                        self.live.item_id = self.buffer.speech_item_id
                        self.live.sent_words = 0
                        self.live.asked_at = start + frame
                else:
                    vad.high_run = 0
            elif p >= td.threshold:
                vad.silence_run = 0
                if spoken:
                    vad.pause_partial = None  # D41: a later pause asks its own partial
                if vad.state in ("review", "held"):
                    # section 5.1: speech again; the verdict awaited is no longer wanted
                    vad.state, vad.awaiting, vad.wait_ms, vad.deadline = "speech", None, 0, None
                    vad.held, vad.reviews = None, 0
                elif vad.state == "fading" and spoken:
                    vad.state = "speech"  # section 5.4: speech again after the fade
                elif vad.state == "fading":
                    self._live_ask(start + frame, pause=True)
                elif fades:
                    # section 5.4: the speech fades: the pause's words, before Silero's lag
                    vad.state = "fading"
                    self._live_ask(start + frame, pause=True)
                else:
                    self._live_ask(start + frame, pause=False)
            else:
                if vad.silence_run == 0:
                    vad.silence_start = start
                vad.silence_run += 1
                silence_ms = vad.silence_run * VAD_FRAME_MS
                policy = td.end_of_turn
                if vad.state in ("review", "held"):
                    if silence_ms >= vad.wait_ms:
                        self._turn_ended()
                        continue
                    self._live_ask(start + frame, pause=True)
                    if (
                        vad.state == "held"
                        and policy is not None
                        and vad.reviews == 1
                        and policy.first_review_ms < SEMANTIC_PAUSE_MS <= silence_ms
                        and p < low
                    ):
                        # section 5.1: an eager first review held; the model's own pause
                        # length gets a second one
                        self._pause_reviewed(start + frame)
                elif p < low and policy is not None and silence_ms >= policy.first_review_ms:
                    # section 5.2: the pause's partial (asked at its first silent frame);
                    # the verdict carries its words (section 5.1)
                    self._live_ask(start + frame, pause=True)
                    self._pause_reviewed(start + frame)
                elif p < low and policy is None and silence_ms >= td.silence_duration_ms:
                    self._turn_ended()
                else:
                    if fades:
                        vad.state = "fading"  # section 5.4
                    self._live_ask(start + frame, pause=True)

    # --- semantic VAD (section 5.1) ----------------------------------------------------

    def _pause_reviewed(self, scored_end: int) -> None:
        """A pause: ask for a verdict on the utterance up to the last scored frame (and
        on the words of the pause's partial, if one was asked); a held pause's second
        review keeps the wait its first one set."""
        td = self.config.turn_detection
        assert td is not None and td.end_of_turn is not None
        vad = self.vad
        self._turn_n += 1
        request_id = f"turn_{self._turn_n}"
        again = vad.state == "held"
        vad.state = "review"
        vad.awaiting = request_id
        vad.reviews += 1
        partial_id = vad.pause_partial
        vad.review_partial, vad.review_at = partial_id, self.now_ms
        if not again:
            self._set_wait(td.end_of_turn.max_wait_ms)
        pcm = self.buffer.pcm_until(scored_end)[-TURN_END_WINDOW_MS * 32 :]
        self._effect(
            SubmitTurnEnd(
                request_id=request_id,
                item_id=self.buffer.speech_item_id or "",
                pcm16=pcm,
                partial_request_id=partial_id,
            )
        )

    def _set_wait(self, wait_ms: int) -> None:
        vad = self.vad
        vad.wait_ms = wait_ms
        # section 5.1: on the session clock a margin later (audio that stopped arriving)
        rest = max(0, wait_ms - vad.silence_run * VAD_FRAME_MS)
        vad.deadline = self.now_ms + rest + PAUSE_CLOCK_MARGIN_MS

    def _pause_overdue(self) -> bool:
        vad = self.vad
        if vad.state not in ("review", "held"):
            return False
        if vad.deadline is not None and self.now_ms >= vad.deadline:
            return True
        return vad.silence_run * VAD_FRAME_MS >= vad.wait_ms

    def _on_turn_end_verdict(self, verdict: TurnEndVerdict) -> None:
        td = self.config.turn_detection
        if td is None or td.end_of_turn is None or verdict.request_id != self.vad.awaiting:
            return  # stale: speech resumed, the turn ended, or the detector was reset
        live, vad = self.live, self.vad
        partial = vad.review_partial
        if (
            verdict.transcript is None
            and verdict.probability is not None
            and partial is not None
            and live.last is not None
            and live.last[0] == partial
        ):
            # section 5.1: the words of the pause go with its verdict; it waits for them
            # within its budget, counted from the review
            until = vad.review_at + self.turn_end_budget_ms
            if not live.last_answered and self.now_ms < until:
                vad.held = (verdict.request_id, verdict.probability, until)
                return
            if live.last_answered:
                verdict = replace(verdict, transcript=live.last_text, punctuated=self.punctuated)
        self._apply_verdict(verdict)

    def _apply_verdict(self, verdict: TurnEndVerdict) -> None:
        td = self.config.turn_detection
        if td is None or td.end_of_turn is None or verdict.request_id != self.vad.awaiting:
            return
        words = verdict.transcript
        finished = verdict.probability is not None and (
            (
                verdict.probability >= td.end_of_turn.threshold
                # words that cannot close a sentence hold the pause whatever the model heard
                and not (words is not None and trails_off(words, punctuated=verdict.punctuated))
            )
            # section 5.5: under eagerness high, words that close a question finish a pause
            # the model holds; a pause without a verdict waits as section 5.1 says
            or (
                td.end_of_turn.questions_finish
                and words is not None
                and closes_question(words, punctuated=verdict.punctuated)
            )
        )
        if finished and self.vad.silence_run * VAD_FRAME_MS >= SEMANTIC_PAUSE_MS:
            self._turn_ended()
            return
        self.vad.state = "held"
        self.vad.awaiting = None
        if finished:
            # AMBIGUITY (docs/session-semantics.md, decision D43): an eager review's
            # "finished" holds the pause until it is as long as the model's own
            wait = SEMANTIC_PAUSE_MS
        elif verdict.probability is not None:
            wait = td.end_of_turn.max_wait_ms
        else:
            # AMBIGUITY (docs/session-semantics.md, decision D33): no verdict holds the
            # pause for server VAD's silence duration
            wait = td.silence_duration_ms
        self._set_wait(wait)
        if self._pause_overdue():
            self._turn_ended()

    def _turn_ended(self) -> None:
        """Speech stops at the end of the last scored frame (sections 5 and 5.1)."""
        td = self.config.turn_detection
        assert td is not None
        vad = self.vad
        end = vad.origin + VAD_FRAME_MS * 16 * vad.frames_seen
        cut = vad.silence_start + ASR_TAIL_MS * 16
        live = self.live
        if vad.pause_partial is not None and live.last is not None:
            # AMBIGUITY (docs/session-semantics.md, decision D41): the commit holds the
            # pause's partial's audio but for the pause's silence: the partial's words
            audio, heard = self.buffer.pcm_until(cut), live.last[1]
            if (
                live.last_pause
                and live.last_quiet
                and (audio.startswith(heard) or heard.startswith(audio))
            ):
                live.last_turn_audio = audio
        self._speech_stopped(end / 16, td.create_response, cut)

    def _speech_started(self, audio_start_ms: float) -> None:
        td = self.config.turn_detection
        assert td is not None
        self.vad.state = "speech"
        self.vad.high_run = 0
        self.vad.silence_run = 0
        item_id = self._new_item_id()
        self.buffer.speech_item_id = item_id
        self.buffer.state = "capturing"
        self.buffer.has_speech = True
        self._emit(
            InputAudioBufferSpeechStarted(audio_start_ms=int(audio_start_ms), item_id=item_id)
        )
        if td.interrupt_response:
            self._drop_delegations(None)
            if self.active is not None:
                self._cancel(self.active, "turn_detected", force_cleared=False)
            elif self.playing():
                self._cleared_only(self.playing_responses())

    # --- live transcripts (section 5.2) ----------------------------------------------

    def _live_ask(self, at: int, *, pause: bool) -> str | None:
        """Speech goes on (VAD scored up to `at`): a partial at a pause or on the cadence,
        unless one is out; a pause's partial supersedes a cadence one still out (its answer
        is dropped). Returns the request id of the partial asked, if one was."""
        live = self.live
        if pause and self.vad.pause_partial is not None:
            return None  # D41: this pause has its partial
        if not live.enabled or live.item_id is None:
            return None
        if live.in_flight is not None and (not pause or live.in_flight[2]):
            return None  # only a pause supersedes, and only a cadence partial
        if not pause and at - live.asked_at < LIVE_CADENCE_MS * 16:
            return None
        live.count += 1
        request_id = f"live:{live.count}"
        live.in_flight = (request_id, live.item_id, pause)
        live.asked_at = at
        pcm16 = self.buffer.pcm_until(at)
        language = self.config.transcription_language
        live.last, live.last_answered, live.last_text = (request_id, pcm16, language), False, None
        live.last_pause, live.last_quiet, live.last_turn_audio = pause, True, None
        if pause:
            self.vad.pause_partial = request_id
        self._effect(
            SubmitPartialAsr(
                request_id=request_id, item_id=live.item_id, pcm16=pcm16, language=language
            )
        )
        return request_id

    def _manual_live(self, speech: bool) -> None:
        """Section 5.2, B41: under manual turns each append's speech verdict plays the
        VAD's part. A hold's first speech names its item; the first quiet append after
        speech asks the pause's partial (one per quiet run), else the cadence asks one;
        all the buffered audio, one at a time, a pause superseding a cadence partial."""
        live = self.live
        if not live.enabled or self.buffer.state != "capturing":
            return
        at = self.clock_samples
        if speech:
            live.last_quiet = False  # speech after the latest partial's audio
        if live.item_id is None:
            if self.buffer.speech_item_id is None:
                self.buffer.speech_item_id = self._new_item_id()
            live.item_id, live.sent_words, live.asked_at = self.buffer.speech_item_id, 0, at
            return
        pause = not speech
        if pause and live.last is not None and live.last_pause and live.last_quiet:
            return  # this quiet run has its partial
        if live.in_flight is not None and (not pause or live.in_flight[2]):
            return  # only a pause supersedes, and only a cadence partial
        if not pause and at - live.asked_at < LIVE_CADENCE_MS * 16:
            return
        live.count += 1
        request_id = f"live:{live.count}"
        live.in_flight = (request_id, live.item_id, pause)
        live.asked_at = at
        pcm16 = self.buffer.pcm_until(None)
        language = self.config.transcription_language
        live.last, live.last_answered, live.last_text = (request_id, pcm16, language), False, None
        live.last_pause, live.last_quiet, live.last_turn_audio = pause, True, None
        self._effect(
            SubmitPartialAsr(
                request_id=request_id, item_id=live.item_id, pcm16=pcm16, language=language
            )
        )

    def _on_partial(self, result: AsrPartial) -> None:
        # AMBIGUITY (docs/session-semantics.md, decision D40): a pause's words may start
        # a preemptive response (B35); this model prepares none: what its wire shows is
        # what a session with one must show (tests/stateful/test_preemption_is_invisible.py)
        live = self.live
        if live.last is not None and live.last[0] == result.request_id:
            live.last_answered, live.last_text = True, result.text
        self._live_text(result)
        held = self.vad.held
        if held is not None and self.vad.review_partial == result.request_id:
            self.vad.held = None
            self._apply_verdict(
                TurnEndVerdict(held[0], held[1], result.text, punctuated=self.punctuated)
            )
        waiting = [submit for rid, submit in live.waiting_asr if rid == result.request_id]
        live.waiting_asr = [w for w in live.waiting_asr if w[0] != result.request_id]
        for submit in waiting:
            if result.text is not None:
                self._later.append(AsrTranscript(submit.request_id, result.text))
            elif self.active is not None and submit.request_id in self.active.open:
                self._effect(submit)  # the partial failed: transcribe after all

    def _live_text(self, result: AsrPartial) -> None:
        """Section 5.2: the words beyond those sent become a delta of the utterance."""
        live = self.live
        if live.in_flight is None or live.in_flight[0] != result.request_id:
            return
        _, item_id, _ = live.in_flight
        live.in_flight = None
        if item_id != live.item_id or result.text is None:
            return  # the utterance ended meanwhile, or the partial failed
        words = result.text.split()
        if len(words) <= live.sent_words:
            return
        delta = " ".join(words[live.sent_words :])
        if live.sent_words:
            delta = " " + delta
        live.sent_words = len(words)
        self._emit(InputAudioTranscriptionDelta(item_id=item_id, delta=delta))

    def _speech_stopped(self, audio_end_ms: float, create_response: bool, cut: int) -> None:
        self.live.item_id = None
        self.vad.state = "silence"
        self.vad.high_run = 0
        self.vad.silence_run = 0
        self.vad.peak_db, self.vad.quiet_run = None, 0
        self.vad.pause_partial, self.vad.reviews = None, 0
        self.vad.awaiting, self.vad.wait_ms, self.vad.deadline = None, 0, None
        # speech_started allocated the id; only a detector reset (commit, clear, update)
        # could drop it, and that also ends speech, so it is always there
        item_id = self.buffer.speech_item_id
        if item_id is None:
            # AMBIGUITY (docs/session-semantics.md, decision D24): unreachable by the rules
            # above; a fresh id
            item_id = self.buffer.speech_item_id = self._new_item_id()
        self._emit(InputAudioBufferSpeechStopped(audio_end_ms=int(audio_end_ms), item_id=item_id))
        refusal = self._commit_refusal()
        if refusal is None:
            self._commit(None, create_response, cut)
            return
        code, message = refusal
        self._server_error(code, message)
        if code == ErrorCode.INPUT_BACKPRESSURE:
            # the utterance is dropped: the buffer is cleared and its bytes released
            self.buffer = _Buffer()
            self._emit(InputAudioBufferCleared())
        # AMBIGUITY (docs/session-semantics.md, decision D25): a VAD commit of an empty buffer
        # (nothing appended since the last commit/clear) is answered with `error
        # input_audio_buffer_empty` without event id; the buffer stays as it is.
