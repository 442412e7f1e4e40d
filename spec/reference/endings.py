"""How the oracle's responses end: the reply's text and audio, `response.done`, cancel
and preemption, stage failures, and playback acks (docs/session-semantics.md sections 3
and 6).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spec.effects import (
    TTS,
    VLM,
    Abort,
    EvictReplica,
    ResponseEnded,
)
from spec.errors import ERROR_TYPE, ErrorCode
from spec.events import (
    ContentPart,
    ConversationItem,
    ConversationItemAdded,
    ConversationItemDone,
    ErrorDetail,
    InputAudioTranscriptionFailed,
    OutputAudioBufferCleared,
    PlaybackAck,
    PlaybackAcknowledged,
    RateLimitsUpdated,
    Response,
    ResponseContentPartAdded,
    ResponseContentPartDone,
    ResponseDone,
    ResponseListen,
    ResponseOutputAudioDelta,
    ResponseOutputAudioDone,
    ResponseOutputAudioTranscriptDelta,
    ResponseOutputAudioTranscriptDone,
    ResponseOutputItemAdded,
    ResponseOutputItemDone,
    ResponseOutputTextDelta,
    ResponseOutputTextDone,
    ResponseStatusDetails,
)
from spec.reference.delegation import Delegation
from spec.reference.records import (
    _Item,
    _reject,
    _Request,
    _Response,
    msgspec_copy,
    msgspec_copy_item,
)

if TYPE_CHECKING:
    from spec.stage_results import (
        StageFailure,
        TtsAudio,
    )

__all__ = [
    "ResponseEndings",
]


class ResponseEndings(Delegation):
    """How responses end: replies, done, cancel, failure, playback."""

    def _finish_listen(self, resp: _Response) -> None:
        # AMBIGUITY (docs/session-semantics.md, decision D16): a listen decision ends with
        # rate_limits.updated like every response.done.
        resp.decision = "listen"
        live = [s for s in resp.segments if self._live(s.item_id, s.version) is not None]
        if live:
            silent = self._live(live[-1].item_id, live[-1].version)
            assert silent is not None
            silent.silent = True
        self._emit(ResponseListen(response_id=resp.id, reason="listen"))
        self._emit_done(resp, "completed", "listen")
        self._end(resp)

    def _emit_text_reply(self, resp: _Response, text: str) -> None:
        """A response without audio output: the reply as an `output_text` assistant item
        with one text delta, then the text done-chain (section 3)."""
        # AMBIGUITY (docs/session-semantics.md, decision D17): "the text done-chain" is read as the
        # audio one with text events: output_text.done, content_part.done, output_item.done,
        # item.done, response.done, rate_limits.updated.
        resp.text_reply = text
        item_id = resp.item_id
        part = ContentPart(type="output_text", text="")
        item = _Item(
            item_id,
            self._new_version(item_id),
            "assistant",
            "in_progress",
            [part],
            self._next_seq(),
            response_id=resp.id,
        )
        prev = self._add_item(item)
        self._emit(ConversationItemAdded(item=self._wire_item(item), previous_item_id=prev))
        self._emit(ResponseOutputItemAdded(response_id=resp.id, item=self._wire_item(item)))
        self._emit(
            ResponseContentPartAdded(response_id=resp.id, item_id=item_id, part=msgspec_copy(part))
        )
        self._emit(ResponseOutputTextDelta(response_id=resp.id, item_id=item_id, delta=text))
        self._emit(ResponseOutputTextDone(response_id=resp.id, item_id=item_id, text=text))
        done_part = ContentPart(type="output_text", text=text)
        self._emit(ResponseContentPartDone(response_id=resp.id, item_id=item_id, part=done_part))
        item.status = "completed"
        item.content = [msgspec_copy(done_part)]
        self._emit(ResponseOutputItemDone(response_id=resp.id, item=self._wire_item(item)))
        self._emit(ConversationItemDone(item=self._wire_item(item)))
        self._emit_response_done(resp, "completed", None, [item_id])
        self._end(resp)

    def _on_tts_audio(self, resp: _Response, result: TtsAudio) -> None:
        item_id = resp.item_id
        if not resp.audio_started:
            resp.audio_started = True
            resp.first_audio_ms = self.now_ms
            item = _Item(
                item_id,
                self._new_version(item_id),
                "assistant",
                "in_progress",
                [ContentPart(type="output_audio", transcript="")],
                self._next_seq(),
                response_id=resp.id,
            )
            prev = self._add_item(item)
            wire = self._wire_item(item)
            self._emit(ConversationItemAdded(item=wire, previous_item_id=prev))
            self._emit(ResponseOutputItemAdded(response_id=resp.id, item=self._wire_item(item)))
            self._emit(
                ResponseContentPartAdded(
                    response_id=resp.id,
                    item_id=item_id,
                    part=ContentPart(type="output_audio", transcript=""),
                )
            )
        ms = (len(result.pcm16) // 2) * 1000.0 / self.config.output_format.rate_hz
        text = result.text
        if result.request_id != resp.last_tts and text[:1].strip() and resp.transcript[-1:].strip():
            text = " " + text  # section 3: sentences of separate requests are spaced
        resp.last_tts = result.request_id
        resp.chunks.append((text, ms))
        resp.generated_ms += ms
        # an item in progress shows the transcript spoken so far (`conversation.item
        # .retrieve` of a reply still speaking); its done part replaces it at the end
        live = self.items.get(item_id)
        if live is not None and live.response_id == resp.id and live.content:
            live.content[0].transcript = resp.transcript
        self._emit(
            ResponseOutputAudioDelta(response_id=resp.id, item_id=item_id, delta=result.pcm16)
        )
        self._emit(
            ResponseOutputAudioTranscriptDelta(response_id=resp.id, item_id=item_id, delta=text)
        )

    def _maybe_complete(self, resp: _Response) -> None:
        if resp.decision is None or any(q.stage in (VLM, TTS) for q in resp.open.values()):
            return
        self._emit_done(resp, "completed", None)
        self._end(resp)

    def _emit_done(self, resp: _Response, status: str, reason: str | None) -> None:
        """The done-chain of an audio response (section 3)."""
        self.calls.cut_open(resp)  # section 3.8: cut during its arguments
        resp.status = status
        item = self._live(resp.item_id, self.versions.get(resp.item_id, 0))
        if resp.audio_started:
            # a cancelled response's transcript is cut to the played prefix (B19)
            # AMBIGUITY (docs/session-semantics.md, decision D34): cut before the client
            # reported a played position, the transcript is everything sent
            cut = status == "cancelled" and resp.acked
            transcript = self._cut_text(resp, resp.played_ms) if cut else resp.transcript
            part = ContentPart(type="output_audio", transcript=transcript)
            rid, iid = resp.id, resp.item_id
            # AMBIGUITY (docs/session-semantics.md, decision D18): "the done-chain as for
            # completion" also for a cancelled or failed response: its assistant item is completed
            # (a cancelled one with the played prefix, which is what enters history, B19).
            self._emit(ResponseOutputAudioDone(response_id=rid, item_id=iid))
            self._emit(
                ResponseOutputAudioTranscriptDone(
                    response_id=rid, item_id=iid, transcript=transcript
                )
            )
            self._emit(ResponseContentPartDone(response_id=rid, item_id=iid, part=part))
            wire = ConversationItem(
                id=resp.item_id, role="assistant", status="completed", content=[part]
            )
            if item is not None and item.response_id == resp.id:
                item.status = "completed"
                item.content = [msgspec_copy(part)]
            self._emit(ResponseOutputItemDone(response_id=resp.id, item=wire))
            # an assistant item the client deleted meanwhile is gone from the
            # conversation: the response closes its output, the conversation has no item
            if item is not None and item.response_id == resp.id:
                self._emit(ConversationItemDone(item=msgspec_copy_item(wire)))
        self._emit_response_done(resp, status, reason, [resp.item_id] if resp.audio_started else [])

    def _emit_response_done(
        self, resp: _Response, status: str, reason: str | None, output: list[str]
    ) -> None:
        resp.status = status
        details = None
        if status != "completed" or reason is not None:
            details = ResponseStatusDetails(type=status, reason=reason)
        self._emit(
            ResponseDone(
                response=Response(
                    id=resp.id,
                    status=status,
                    status_details=details,
                    output=[ConversationItem(id=i, role="assistant") for i in output],
                )
            )
        )
        self._emit(RateLimitsUpdated())
        self._effect(ResponseEnded(resp.id))

    def _fail_waiting_segments(self, resp: _Response, code: ErrorCode, message: str) -> None:
        """Items of the response's segments still awaiting a transcript: transcription
        failed, then their done (before the done-chain, I2)."""
        for seg in resp.segments:
            item = self._live(seg.item_id, seg.version)
            if item is None or item.awaiting_index is None:
                continue
            item.awaiting_index = None
            item.status = "completed"  # the audio is kept; only its transcript is missing
            self._emit(
                InputAudioTranscriptionFailed(
                    item_id=item.id,
                    content_index=seg.content_index,
                    error=ErrorDetail(
                        type=ERROR_TYPE[code].value, code=code.value, message=message
                    ),
                )
            )
            self._emit(ConversationItemDone(item=self._wire_item(item)))

    def _end(self, resp: _Response) -> None:
        """The response is over: release its input, start the deferred commits."""
        resp.open.clear()
        for s in resp.segments:
            s.audio_held = s.frames_held = 0
        self.active = None
        # AMBIGUITY (docs/session-semantics.md, decision D19): only a deferred commit starts the
        # next response; it takes every queued commit and item with it.
        if self.deferred:
            self._start_response([])
        elif self.waiting_answers:
            self._follow_up(self.waiting_answers.pop(0))

    def _clear_playback(self, responses: list[_Response]) -> None:
        for r in responses:
            r.cleared = True
            self._emit(OutputAudioBufferCleared(response_id=r.id))

    def _cancel(self, resp: _Response, reason: str, *, force_cleared: bool) -> None:
        """Cancel the active response (section 3): Aborts, cleared events (oldest first),
        failed transcripts, then the done-chain."""
        self.epoch += 1
        for req in list(resp.open.values()):
            self._effect(Abort(request_id=req.request_id, stage=req.stage, response_id=resp.id))
        resp.open.clear()
        clear = self.playing_responses()
        if resp.audio_started or force_cleared:
            clear.append(resp)
        self._clear_playback(clear)
        self._fail_waiting_segments(resp, ErrorCode.COMMIT_ABORTED, f"response {reason}")
        self._emit_done(resp, "cancelled", reason)
        self._end(resp)

    def _cleared_only(self, responses: list[_Response]) -> None:
        if self.active is None:  # the epoch fences requests: an active response's go on
            self.epoch += 1
        self._clear_playback(responses)

    def _on_cancel(self, response_id: str | None, eid: str | None, *, clear: bool) -> None:
        delegating = bool(self.delegations or self.waiting_answers)
        if response_id is None or response_id in self.responses:  # else refused below
            self._drop_delegations(response_id)
        active = self.active
        if active is not None and response_id in (None, active.id):
            self._cancel(
                active,
                "output_audio_buffer_clear" if clear else "client_cancelled",
                force_cleared=clear,
            )
            return
        playing = [
            r for r in self.playing_responses() if response_id is None or r.id == response_id
        ]
        # a named response that is not the active one but may still be playing is
        # cleared alone; the active response goes on (B11)
        if playing and (active is None or response_id is not None):
            self._cleared_only(playing)
            return
        known = response_id is not None and response_id in self.responses
        if clear:
            # AMBIGUITY (docs/session-semantics.md, decision D20): "same response_id rules as
            # cancel": an unknown named id is `response_not_active`, a known one that is neither
            # active nor playing is a no-op; only without an id does "nothing to clear" emit
            # `cleared`.
            if response_id is not None and not known:
                raise _reject(ErrorCode.RESPONSE_NOT_ACTIVE, "no such response", "response_id", eid)
            if response_id is None:
                self._emit(OutputAudioBufferCleared())
            return
        if known:
            return  # a known finished response: no-op
        if delegating and response_id is None:
            return  # it dropped the delegations (3.6)
        raise _reject(
            ErrorCode.RESPONSE_NOT_ACTIVE,
            "no active response",
            "response_id" if response_id else None,
            eid,
        )

    def _on_failure(self, resp: _Response, req: _Request, failure: StageFailure) -> None:
        del resp.open[req.request_id]
        if failure.may_have_accepted:
            self._effect(Abort(request_id=req.request_id, stage=req.stage, response_id=resp.id))
        if failure.engine_dead:
            self._effect(EvictReplica(stage=req.stage))
        for other in list(resp.open.values()):
            self._effect(Abort(request_id=other.request_id, stage=other.stage, response_id=resp.id))
        resp.open.clear()
        self._fail_response(resp, ErrorCode(failure.code), failure.message)

    def _fail_response(self, resp: _Response, code: ErrorCode, message: str) -> None:
        """A response fails with `code` (a stage failure, section 3.4; a call its
        `tool_choice` asked for and the model did not make, section 3.8)."""
        self._server_error(code, message)
        self._fail_waiting_segments(resp, code, message)
        # the reason is the failure's code; the epoch does not change
        self._emit_done(resp, "failed", code.value)
        self._end(resp)

    # --- playback (section 6) ----------------------------------------------------------

    def _on_ack(self, event: PlaybackAck) -> None:
        eid = event.event_id
        resp: _Response | None = None
        if event.response_id is not None:
            resp = self.responses.get(event.response_id)
        elif event.item_id is not None:
            # AMBIGUITY (docs/session-semantics.md, decision D21): "else" = when no
            # response_id is given
            resp = next((r for r in self.responses.values() if r.item_id == event.item_id), None)
        if resp is None or not resp.audio_started:
            raise _reject(ErrorCode.PLAYBACK_ITEM_NOT_FOUND, "unknown response", "response_id", eid)
        if event.item_id is not None and event.item_id != resp.item_id:
            # AMBIGUITY (docs/session-semantics.md, decision D22): the param is `item_id`
            raise _reject(
                ErrorCode.PLAYBACK_ITEM_MISMATCH, "not this response's item", "item_id", eid
            )
        resp.played_ms = min(max(resp.played_ms, float(event.played_ms)), resp.generated_ms)
        resp.acked = True
        self._emit(
            PlaybackAcknowledged(
                response_id=resp.id, item_id=resp.item_id, played_ms=resp.played_ms
            )
        )
