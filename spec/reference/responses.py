"""The oracle's responses and their stages: creating a response, the ASR, VLM and TTS
requests it opens, the prompt, and the VLM's decision (docs/session-semantics.md
section 3).
"""

from __future__ import annotations

from dataclasses import replace

from spec.effects import (
    ASR,
    DELEGATION,
    TTS,
    VLM,
    HistoryTurn,
    ItemRef,
    PromptInput,
    Stage,
    SubmitAsr,
    SubmitDelegation,
    SubmitTts,
    SubmitVlm,
)
from spec.errors import ErrorCode
from spec.events import (
    ContentPart,
    ConversationItemDone,
    InputAudioTranscriptionCompleted,
    Response,
    ResponseCreate,
    ResponseCreated,
)
from spec.reference.items import ConversationItems
from spec.reference.media import (
    _sentences,
)
from spec.reference.records import (
    _PromptParts,
    _reject,
    _Request,
    _Response,
    _Segment,
)
from spec.session_config import (
    DEFAULT_INSTRUCTIONS,
)
from spec.stage_results import (
    AsrTranscript,
    VlmDecisionResult,
    VlmDelta,
)

__all__ = [
    "ResponseStages",
]


class ResponseStages(ConversationItems):
    """Responses and their stages (section 3)."""

    # --- responses (section 3) ---------------------------------------------------------

    def _on_response_create(self, event: ResponseCreate) -> None:
        eid = event.event_id
        if self.active is not None:
            raise _reject(ErrorCode.RESPONSE_ALREADY_ACTIVE, "a response is active", None, eid)
        queued = self.retained + self.deferred + self.unanswered
        if not queued:
            if not self.buffer.frames or self.buffer.state != "idle":
                raise _reject(
                    ErrorCode.RESPONSE_CREATE_WITHOUT_INPUT, "nothing to answer", None, eid
                )
            # AMBIGUITY (docs/session-semantics.md, decision D10): "that frame becomes a camera
            # commit" is read as a commit of the whole idle input buffer (a capturing buffer with a
            # frame is refused: "a frame in the idle buffer"); its `committed` carries no client
            # event id (there is no commit event).
            self._commit(None, True)
            return
        # AMBIGUITY (docs/session-semantics.md, decision D11): `response.output_modalities` of the
        # event is not in the document; only the session's output_modalities are used.
        self._start_response([])

    def _start_response(self, extra: list[_Segment]) -> None:
        # AMBIGUITY (docs/session-semantics.md, decision D12): every response consumes ALL queued
        # input: retained and deferred commits and unanswered created items, oldest first.
        segments = sorted(
            self.retained + self.deferred + self.unanswered + extra, key=lambda s: s.seq
        )
        self.retained, self.deferred, self.unanswered = [], [], []
        self._resp_n += 1
        rid = f"resp_{self._resp_n}"
        resp = _Response(
            id=rid,
            item_id=self._new_item_id(),
            epoch=self.epoch,
            segments=segments,
            audio_out="audio" in self.config.output_modalities,
        )
        self.responses[rid] = resp
        self.active = resp
        self._emit(ResponseCreated(response=Response(id=rid, status="in_progress")))
        asr = [s for s in segments if s.speech] if self.profile == "speech" else []
        if not asr:
            self._submit_vlm(resp)
            return
        for seg in asr:
            req = self._open(resp, ASR, seg)
            resp.asr_pending += 1
            self._transcribe(
                SubmitAsr(
                    request_id=req.request_id,
                    response_id=rid,
                    epoch=self.epoch,
                    item=ItemRef(seg.item_id, seg.version, seg.content_index),
                    pcm16=seg.audio,
                    language=self.config.transcription_language,
                )
            )
            seg.audio_held = 0  # released at its SubmitAsr (B8)

    def _transcribe(self, submit: SubmitAsr) -> None:
        """Section 5.2: the commit of exactly the audio (and language) the latest partial
        heard, or the commit the detector made in that partial's pause (D41), takes that
        partial's text as its transcript: now if it answered, when it answers otherwise;
        a partial that failed leaves the commit its own ASR."""
        live = self.live
        if (
            live.last is None
            or live.last[2] != submit.language
            or submit.pcm16 not in (live.last[1], live.last_turn_audio)
        ):
            self._effect(submit)
        elif not live.last_answered:
            live.waiting_asr.append((live.last[0], submit))
        elif live.last_text is None:
            self._effect(submit)
        else:
            self._later.append(AsrTranscript(submit.request_id, live.last_text))

    def _open(self, resp: _Response, stage: Stage, segment: _Segment | None = None) -> _Request:
        resp.counters[stage] += 1
        req = _Request(
            f"{resp.id}:{stage}:{resp.counters[stage]}", stage, resp.id, self.epoch, segment
        )
        resp.open[req.request_id] = req
        return req

    def _submit_vlm(self, resp: _Response) -> None:
        resp.vlm_submitted = True
        # section 3.8: under `required` or a named function the response must call
        resp.must_call = self.config.tool_choice.forces_call(self.calls.offered())
        req = self._open(resp, VLM)
        parts = self._prompt_parts(resp)
        for s in resp.segments:
            # frame bytes are released at the SubmitVlm; so is audio that no ASR took
            # (the camera profile)
            s.audio_held = s.frames_held = 0
        self._effect(
            SubmitVlm(
                request_id=req.request_id,
                response_id=resp.id,
                epoch=self.epoch,
                prompt=PromptInput(
                    system=self.config.instructions or DEFAULT_INSTRUCTIONS,
                    history=parts.history,
                    transcript=parts.transcript,
                    frames=parts.frames,
                    time_s=parts.time_s,
                    history_times_s=parts.times,
                    history_frames=parts.shown,
                    asked_before=self.asked,
                ),
                max_tokens=self.config.max_output_tokens,
                tools=self.calls.offered(),
                tool_choice=self.config.tool_choice,
            )
        )
        self._keep_frames(resp.segments)
        self.asked = self.asked or parts.transcript is not None

    def _prompt_parts(self, resp: _Response, *, ticks: bool = True) -> _PromptParts:
        """History, transcript and frames of a response's prompt, as of now (3.2); with
        `ticks`, history in tick form with times and kept frames (4.1)."""
        mine = {(s.item_id, s.version) for s in resp.segments}
        history: list[HistoryTurn] = []
        times: list[float | None] = []
        shown: list[tuple[bytes, ...]] = []
        for item in self.items.values():
            if (item.id, item.version) in mine or item.status != "completed":
                continue
            if item.call is not None:  # a function call or output (3.8): no tick
                text = self.calls.text(item)
                if text:
                    history.append(HistoryTurn(item.role, text))
                    times.append(None)
                    shown.append(())
                continue
            if item.response_id in self.responses:
                text = self._assistant_text(self.responses[item.response_id])
            else:  # user and system items, and the item of a forgotten response
                text = " ".join(t for p in item.content for t in (p.text, p.transcript) if t)
            # AMBIGUITY (docs/session-semantics.md, decision D30): history is in tick form:
            # every user turn enters it, camera-only ones with an empty text, and a turn
            # answered with silence is followed by an empty assistant turn.
            if text or item.tick:
                history.append(HistoryTurn(item.role, text))
                times.append(item.time_s)
                shown.append(self._frames_of(item) if item.tick else ())
            if item.silent:
                history.append(HistoryTurn("assistant", ""))
                times.append(None)
                shown.append(())
        # AMBIGUITY (docs/session-semantics.md, decision D13): a segment whose item was deleted
        # meanwhile contributes neither text nor frames; an item's texts keep their content order,
        # its ASR transcript in the place of its audio part.
        live = [s for s in resp.segments if self._live(s.item_id, s.version) is not None]
        texts = [
            t
            for s in live
            for t in (s.transcript if x is None else x for x in s.texts)
            if t is not None and t.strip()
        ]
        frames = tuple(f for s in live for f in s.frames)
        prompt = _PromptParts(
            history=tuple(history),
            transcript=" ".join(texts) or None,
            frames=frames,
            time_s=self.items[live[-1].item_id].time_s if live else None,
            times=tuple(times),
            shown=tuple(shown),
        )
        if not ticks:  # the delegation's context: the texts only (D32)
            words = [(t, i) for t, i in zip(history, times, strict=True) if t.text]
            return replace(prompt, history=tuple(t for t, _ in words), times=(), shown=())
        return prompt

    def _cut_text(self, resp: _Response, cut: float | None) -> str:
        """The transcript of a response's audio up to `cut` ms (all when None)."""
        if cut is None:
            return resp.transcript
        out: list[str] = []
        t = 0.0
        for text, ms in resp.chunks:
            if t + ms <= cut:
                out.append(text)
            elif t < cut and ms > 0:
                out.append(text[: int(len(text) * (cut - t) / ms)])
            t += ms
        return "".join(out)

    def _assistant_text(self, resp: _Response) -> str:
        """The history text of a response: its played prefix once its playback was
        cleared (B19, recomputed from later acks), cut at its truncation point."""
        if resp.text_reply is not None:
            return resp.text_reply
        cut: float | None = resp.played_ms if resp.cleared and resp.acked else None
        if resp.truncated_ms is not None:
            cut = resp.truncated_ms if cut is None else min(cut, resp.truncated_ms)
        return self._cut_text(resp, cut)

    def _on_transcript(self, resp: _Response, req: _Request, result: AsrTranscript) -> None:
        del resp.open[req.request_id]
        resp.asr_pending -= 1
        seg = req.segment
        assert seg is not None
        item = self._live(seg.item_id, seg.version)
        if item is not None and item.awaiting_index is not None:
            seg.transcript = result.text
            item.status = "completed"
            item.awaiting_index = None
            if result.text.strip():
                item.content[seg.content_index] = ContentPart(
                    type=item.content[seg.content_index].type, transcript=result.text
                )
                self._emit(
                    InputAudioTranscriptionCompleted(
                        item_id=item.id, content_index=seg.content_index, transcript=result.text
                    )
                )
            # a blank transcript emits only the item's done
            self._emit(ConversationItemDone(item=self._wire_item(item)))
        # AMBIGUITY (docs/session-semantics.md, decision D14): a dropped transcript (deleted
        # version) still counts as an answered ASR request for the VLM hand-off.
        if resp.asr_pending == 0 and not resp.vlm_submitted:
            self._submit_vlm(resp)

    def _submit_tts(self, resp: _Response, text: str) -> None:
        req = self._open(resp, TTS)
        resp.tts_submitted += 1
        self._effect(
            SubmitTts(
                request_id=req.request_id,
                response_id=resp.id,
                epoch=self.epoch,
                seq=resp.counters[TTS],
                text=text,
                sample_rate_hz=self.config.output_format.rate_hz,
                voice=self.config.voice,
            )
        )

    def _on_vlm_delta(self, resp: _Response, result: VlmDelta) -> None:
        resp.saw_delta = True
        if not resp.audio_out or resp.must_call:  # shown at the decision; held (3.8)
            resp.vlm_text += result.text
            return
        done, rest = _sentences(resp.vlm_text + result.text, first=resp.tts_submitted == 0)
        resp.vlm_text = rest
        for sentence in done:
            self._submit_tts(resp, sentence)

    def _on_vlm_decision(self, resp: _Response, req: _Request, result: VlmDecisionResult) -> None:
        del resp.open[req.request_id]
        # the decision carries the whole reply: with streamed deltas only their unspoken
        # remainder is left, else the decision text is the reply. `delegate` and unknown
        # actions act like `speak`.
        rest = (resp.vlm_text if resp.saw_delta else result.text).strip()
        resp.vlm_text = ""
        self.calls.finish_all(resp)  # section 3.8: the decision makes its calls
        if result.action == "listen":
            rest = ""
        question = result.question.strip() if result.action == "delegate" else ""
        # section 3.8: the session offers the delegation's function: a call
        called = bool(question) and self.calls.delegate(resp, question)
        if resp.must_call and not self.calls.made(resp):
            # section 3.8: no call its `tool_choice` asks for: the response fails, unspoken
            self._fail_response(resp, ErrorCode.TOOL_CHOICE_UNMET, "the model made no call")
            return
        if question and not called and self.delegation:
            # section 3.6: the question goes to the background model, the note is spoken
            parts = self._prompt_parts(resp, ticks=False)
            history, transcript = parts.history, parts.transcript
            request_id = f"{resp.id}:{DELEGATION}:1"
            self.delegations[request_id] = resp.id
            self._effect(
                SubmitDelegation(
                    request_id=request_id,
                    response_id=resp.id,
                    epoch=self.epoch,
                    question=question,
                    history=history,
                    transcript=transcript,
                )
            )
        self._decide(resp, result.action, rest)

    def _decide(self, resp: _Response, action: str, rest: str) -> None:
        """The reply text is known (3.2): speak or show the rest of it, or listen."""
        called = self.calls.made(resp)  # a response that called is no silence (3.8)
        if not resp.audio_out:
            if not rest and called:
                resp.decision = action
                self._maybe_complete(resp)
                return
            if not rest:
                self._finish_listen(resp)
                return
            resp.decision = action
            self._emit_text_reply(resp, rest)
            return
        if rest:
            self._submit_tts(resp, rest)
        if resp.tts_submitted == 0 and not called:
            self._finish_listen(resp)
            return
        # AMBIGUITY (docs/session-semantics.md, decision D15): `listen` after TTS was sent completes
        # like `speak` once the TTS finishes (status completed, no reason, no response.listen).
        resp.decision = action
        self._maybe_complete(resp)
