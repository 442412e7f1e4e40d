"""`Responses`: a session's model turns, from the commits that wait for one to the audio
that may still be playing (B1, B11, B14-B19).

What it owns: the queue of commits waiting for a response (retained, deferred, adopted),
the one active response (I1), and every response whose audio may still be playing. Stage
results reach a response only through an open request id of the right stage; anything
else (a late result, an older epoch) is fenced here, silently (I2, B11). What goes on the
wire as a response is produced is written by `core.response_output`; this decides when.

The cross-machine rules live in `_couple`, run whenever a response ends: the active slot is
freed and deferred commits start the next response (else a background answer waiting for
the slot, B31), in one place, as the client side's `_couple` does for its machines.

Delegation (B31, `core.delegations`): a `delegate` decision asks the background model; its
answer is spoken as a follow-up response the server creates, an interrupt aborts it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.delegations import Delegations
from core.function_calls import FunctionCalls
from core.preemption import Preemption
from core.prompt_input import build_prompt, pause_prompt, record_shown, record_silence
from core.remembered_responses import RememberedResponses
from core.response_output import ResponseOutput
from core.statemachines.playback import Playback
from core.statemachines.response import Response
from spec import events as ev
from spec.effects import (
    ASR,
    DELEGATION,
    TTS,
    VLM,
    Abort,
    EvictReplica,
    ItemRef,
    SubmitAsr,
    SubmitVlm,
)
from spec.error_events import error_detail, error_event
from spec.errors import ErrorCode, RemoteProtocolError
from spec.limits import MAX_FUNCTION_ARGUMENTS_BYTES
from spec.stage_results import (
    TtsAudio,
    TtsDone,
    VlmAction,
    VlmCallDelta,
    VlmDecisionResult,
    VlmDelta,
)
from spec.tables import CommitState, FunctionCallState, ItemState

if TYPE_CHECKING:
    from collections.abc import Callable

    from core.conversation import Conversation
    from core.outbox import Outbox
    from core.pending_input import PendingInput
    from core.statemachines.commit import Commit
    from core.statemachines.item import Item
    from core.statemachines.speculation import HeldResult
    from core.turn_log import TurnLog
    from spec.session_config import SessionConfig
    from spec.stage_results import AsrTranscript, DelegationAnswer, StageFailure

__all__ = ["Responses"]


class Responses:
    __slots__ = (
        "_config",
        "_items",
        "_out",
        "_pending",
        "_transcribe",
        "active",
        "by_id",
        "calls",
        "delegations",
        "log",
        "output",
        "preemption",
        "profile",
        "queue",
    )

    def __init__(
        self,
        outbox: Outbox,
        items: Conversation,
        pending: PendingInput,
        *,
        config: Callable[[], SessionConfig],
        profile: str,
        log: TurnLog,
        transcribe: Callable[[SubmitAsr], None] | None = None,
    ) -> None:
        self._out = outbox
        #: a commit's ASR request goes here (`core.turn_taking` may answer it with a live
        #: partial of the same audio); by default straight to the outbox
        self._transcribe = transcribe or outbox.effect
        self._items = items
        self._pending = pending
        self._config = config  # the session's current configuration
        self.profile = profile
        self.queue: list[Commit] = []  # retained, deferred and adopted, oldest first
        self.active: Response | None = None
        self.by_id = RememberedResponses()
        self.delegations = Delegations()  # questions at the background model (B31)
        self.calls = FunctionCalls()  # function calls until their outputs (B38, B39)
        self.log = log  # times, frames and silences of the turns, for history (B29)
        self.preemption = Preemption(outbox)  # a reply prepared during a pause (B35)
        #: what the responses put on the wire: items, deltas, TTS requests, the done-chain
        self.output = ResponseOutput(outbox, items, self.calls, config)

    # --- commits ------------------------------------------------------------------------

    def queued_commits(self) -> int:
        """Commits waiting (retained or deferred); items created by the client don't count."""
        return sum(1 for c in self.queue if not c.adopted)

    def accept(self, commit: Commit, *, wants_response: bool) -> None:
        """A commit with content: it waits (no response asked, or one is active) or starts
        a response together with everything queued (B14, B16)."""
        self.log.stamp(commit.item)
        if not wants_response:
            commit.retain()
        elif self.active is not None:
            commit.defer()
        else:
            self.start([*self.queue, commit])
            return
        self.enqueue(commit)

    def enqueue(self, commit: Commit) -> None:
        self.log.stamp(commit.item)
        self.queue.append(commit)
        if not self._needs_asr(commit) and commit.item.state is ItemState.IN_PROGRESS:
            commit.item.complete()

    def withdraw(self, item: Item) -> None:
        """The item was deleted: its waiting commits go, with their reservations."""
        self.log.forget(item)
        for commit in [c for c in self.queue if c.item is item]:
            commit.withdraw()
            self._pending.release(commit)
            self.queue.remove(commit)

    def _needs_asr(self, commit: Commit) -> bool:
        return self.profile == "speech" and commit.has_speech and bool(commit.pcm16)

    # --- starting -----------------------------------------------------------------------

    def create(self, modalities: list[str] | None, event_id: str | None) -> bool:
        """`response.create`: start with the queued commits; False when nothing is queued."""
        if self.active is not None:
            raise RemoteProtocolError(
                f"response `{self.active.id}` is still active",
                code=ErrorCode.RESPONSE_ALREADY_ACTIVE,
                event_id=event_id,
            )
        if not self.queue:
            return False
        self.start(list(self.queue), modalities)
        return True

    def start(self, segments: list[Commit], modalities: list[str] | None = None) -> None:
        for commit in segments:
            if self._needs_asr(commit):
                commit.route_asr()
            else:
                commit.route_vlm()
                if commit.item.state is ItemState.IN_PROGRESS:
                    commit.item.complete()
        # by identity, in one pass: linear in the queue however many segments start
        taken = {id(c) for c in segments}
        self.queue = [c for c in self.queue if id(c) not in taken]
        config = self._config()
        response = self._open(segments, modalities)
        response_id = response.id
        asr = [c for c in segments if c.state is CommitState.ROUTED_ASR]
        if not asr:
            self._submit_vlm(response)
            return
        response.transcribe()
        for commit in asr:
            request_id = response.open_asr(commit)
            ref = ItemRef(commit.item.id, commit.item.version, commit.content_index)
            pcm16 = self._pending.take_audio(commit)
            self._transcribe(
                SubmitAsr(
                    request_id,
                    response_id,
                    self._out.epoch,
                    ref,
                    pcm16,
                    language=config.transcription_language,
                )
            )

    def _open(self, segments: list[Commit], modalities: list[str] | None) -> Response:
        """A new response, the active one: `response.created`."""
        response_id = self._out.next_id("resp")
        item_id = self._out.next_id("item")
        response = Response(
            self._out,
            response_id,
            item_id=item_id,
            segments=segments,
            playback=Playback(self._out, response_id=response_id, item_id=item_id),
            modalities=tuple(modalities or self._config().output_modalities),
        )
        self.active = response
        self.by_id[response_id] = response
        self._out.emit(response.created_event())
        return response

    def _submit_vlm(self, response: Response) -> None:
        response.generate()
        config = self._config()
        prompt = build_prompt(
            instructions=config.instructions,
            items=self._items,
            responses=self.by_id,
            segments=response.segments,
            log=self.log,
        )
        segments = response.segments
        item_id = segments[0].item.id if len(segments) == 1 else None
        taken = None
        if self.preemption.preparing:
            taken = self.preemption.take(
                item_id, prompt, self.output.reply_terms(response.modalities)
            )
        if taken is not None:  # B35: the reply prepared during the pause is this one
            speculation, held = taken
            assert speculation.prompt.time_s is not None
            self.log.restamp(segments[0].item, speculation.prompt.time_s)
            prompt = speculation.prompt
        record_shown(self.log, segments, prompt)
        for commit in segments:
            self._pending.release(commit)
        if taken is None:
            tools = self.output.offered_tools()
            request_id = response.ask_model(must_call=config.tool_choice.forces_call(tools))
            self._out.effect(
                SubmitVlm(
                    request_id,
                    response.id,
                    self._out.epoch,
                    prompt,
                    max_tokens=config.max_output_tokens,
                    tools=tools,
                    tool_choice=config.tool_choice,
                )
            )
            return
        response.adopt(speculation.id, speculation.vlm_request, speculation.tts_requests)
        self._replay(response, held)

    def preempt(self, item_id: str, words: str, frames: tuple[bytes, ...]) -> bool:
        """A pause of the utterance `item_id` heard `words`, with `frames` buffered: start
        preparing its reply if the session would answer a turn that ended now (B35);
        whether it did."""
        config = self._config()
        detection = config.turn_detection
        if not config.preemptive_response or detection is None or not detection.create_response:
            return False
        if self.profile != "speech" or self.active is not None or self.queue or not words.strip():
            return False
        # a prepared reply holds no calls: tools answer at the turn's end
        if self.output.offered_tools():
            return False
        prompt = pause_prompt(
            instructions=config.instructions,
            items=self._items,
            responses=self.by_id,
            log=self.log,
            transcript=words,
            frames=frames,
        )
        self.preemption.start(item_id, prompt, self.output.reply_terms(config.output_modalities))
        return True

    def _replay(self, response: Response, held: list[HeldResult]) -> None:
        """An adopted preemptive response's results, applied in the order they came, as
        if they came now (B35): the client sees what it would have seen without it."""
        now_ms = self.log.clock_ms
        handlers = {
            VlmDelta: self.on_vlm_delta,
            VlmDecisionResult: self.on_vlm_decision,
            TtsAudio: self.on_tts_audio,
            TtsDone: self.on_tts_done,
        }
        for result in held:
            if self.active is not response:
                return  # it ended (a failure cannot be held): the rest is fenced anyway
            handlers[type(result)](result, now_ms)  # type: ignore[operator]

    # --- stage results ------------------------------------------------------------------

    def _lookup(self, request_id: str, stage: str) -> Response | None:
        """The active response that owns an open request of `stage`, else None (fenced)."""
        response = self.active
        if response is None or not response.owns(request_id, stage):
            return None
        return response

    def on_transcript(self, result: AsrTranscript, now_ms: int) -> None:
        response = self._lookup(result.request_id, ASR)
        if response is None:
            return
        commit = response.take_asr_target(result.request_id)
        commit.transcribe(result.text)
        item = commit.item
        if self._items.accepts_result(item):  # I7, B5
            if result.text.strip():
                item.transcribe(transcript=result.text, content_index=commit.content_index)
            else:
                item.complete()
        if not response.asr_targets:
            self._submit_vlm(response)

    def on_vlm_delta(self, result: VlmDelta, now_ms: int) -> None:
        response = self._lookup(result.request_id, VLM)
        if response is None:
            return
        for sentence in response.add_text(result.text):
            self.output.submit_tts(response, sentence)

    def on_vlm_call_delta(self, result: VlmCallDelta, now_ms: int) -> None:
        """A piece of a function call (B38): its first opens the call's item, if the
        session offers that function; arguments past their bound cut it."""
        response = self._lookup(result.request_id, VLM)
        if response is None:
            return
        if result.index not in response.calls:
            self.output.open_call(response, result.index, result.name)
        call = response.calls[result.index]
        if call is None or call.state is not FunctionCallState.ARGUMENTS:
            return  # not offered, or cut at its bound: the model's extra words are dropped
        if len((call.arguments + result.delta).encode()) > MAX_FUNCTION_ARGUMENTS_BYTES:
            call.cut()
            return
        if result.delta:
            call.stream(result.delta)

    def on_vlm_decision(self, result: VlmDecisionResult, now_ms: int) -> None:
        response = self._lookup(result.request_id, VLM)
        if response is None:
            return
        rest = response.decide(
            result.request_id, text=result.text, listen=result.action == VlmAction.LISTEN
        )
        for call in response.calls.values():  # the model decided: its calls are made
            if call is not None and call.state is FunctionCallState.ARGUMENTS:
                call.finish()
        question = result.question.strip() if result.action == VlmAction.DELEGATE else ""
        tool = self.output.delegation_tool() if question else None
        if tool is not None:  # B40: the client answers it, as a function call
            self.output.call_delegation(response, tool, question)
        if response.must_call and not any(response.calls.values()):
            # 3.8: no call the session's `tool_choice` asks for: nothing of it is spoken
            self._fail(response, ErrorCode.TOOL_CHOICE_UNMET, "the model made no call")
            return
        if tool is None and question and self.delegations.enabled:
            self._delegate(response, question)
        self._answer(response, rest)

    def _answer(self, response: Response, rest: str) -> None:
        """The reply text is known: speak (or show) what is left of it, or listen."""
        called = any(response.calls.values())  # a response that calls is no silence
        if "audio" not in response.modalities:
            if not rest:
                if called:
                    self._maybe_complete(response)
                else:
                    self._listen(response)
                return
            self.output.show_text(response, rest)
            self._maybe_complete(response)
            return
        if rest:
            self.output.submit_tts(response, rest)
        if response.tts_seq == 0 and not called:
            self._listen(response)
            return
        self._maybe_complete(response)

    def _listen(self, response: Response) -> None:
        """The response ends in silence, which history keeps (B29)."""
        response.listen()
        record_silence(self.log, response.segments)
        self._couple()

    # --- delegation (B31, D32) -----------------------------------------------------------

    def _delegate(self, response: Response, question: str) -> None:
        """Hand the question to the background model, with the conversation as context."""
        prompt = build_prompt(
            instructions=self._config().instructions,
            items=self._items,
            responses=self.by_id,
            segments=response.segments,
        )
        self.delegations.ask(self._out, response.id, question, prompt)

    def on_delegation_answer(self, result: DelegationAnswer, now_ms: int) -> None:
        if self.delegations.close(result.request_id) is None or not result.text.strip():
            return  # fenced (dropped by an interrupt), or nothing to say
        if self.active is None:
            self._follow_up(result.text)
        else:  # never over a reply: it waits for the slot (D32)
            self.delegations.waiting.append(result.text)

    def _follow_up(self, text: str) -> None:
        """Speak a background answer as a response of its own, created by the server."""
        response = self._open([], None)
        response.generate()
        # the answer takes the path of a streamed reply: sentence by sentence to TTS
        request_id = response.new_request(DELEGATION)
        for sentence in response.add_text(text):
            self.output.submit_tts(response, sentence)
        self._answer(response, response.decide(request_id, text=text, listen=False))

    def on_tts_audio(self, result: TtsAudio, now_ms: int) -> None:
        response = self._lookup(result.request_id, TTS)
        if response is None:
            return
        self.output.audio(response, result, now_ms)

    def on_tts_done(self, result: TtsDone, now_ms: int) -> None:
        response = self._lookup(result.request_id, TTS)
        if response is None:
            return
        response.close_request(result.request_id)
        self._maybe_complete(response)

    def on_stage_failure(self, result: StageFailure, now_ms: int) -> None:
        if self.delegations.close(result.request_id) is not None:
            self.delegations.failed(self._out, result.message)
            return
        response = self.active
        if response is None or result.request_id not in response.open_requests:
            return  # fenced: a late failure of a finished response
        stage = response.close_request(result.request_id)
        if result.may_have_accepted:  # B18: the engine may hold it; abort exactly once
            self._out.effect(Abort(result.request_id, stage, response.stage_key))
        if result.engine_dead:
            self._out.effect(EvictReplica(stage))
        self._fail(response, result.code, result.message)

    def _fail(self, response: Response, code: ErrorCode, message: str) -> None:
        self._abort_open(response)
        self._out.emit(error_event(code, message))
        self._fail_waiting_segments(response, code, message)
        self.output.close(response)
        response.fail(code.value, {"code": code.value, "message": message})
        self._couple()

    # --- ending -------------------------------------------------------------------------

    def _maybe_complete(self, response: Response) -> None:
        if not response.output_finished:
            return
        self.output.close(response)
        response.complete()
        self._couple()

    def _couple(self) -> None:
        """The active response ended: free the slot; deferred commits start the next one."""
        self.active = None
        if any(c.state is CommitState.DEFERRED for c in self.queue):
            self.start(list(self.queue))
        elif self.delegations.waiting:  # the user's turn first; then a waiting answer (D32)
            self._follow_up(self.delegations.waiting.popleft())

    def _abort_open(self, response: Response) -> None:
        for request_id, stage in response.abort_all():
            self._out.effect(Abort(request_id, stage, response.stage_key))
        for request_id in response.drop_adopted_tts():  # asked by its preemptive response
            self._out.effect(Abort(request_id, TTS, response.stage_key))

    def _fail_waiting_segments(self, response: Response, code: ErrorCode, message: str) -> None:
        """Segments still waiting for a transcript are failed explicitly (B17)."""
        for commit in response.take_waiting_segments():
            commit.fail()
            item = commit.item
            if self._items.accepts_result(item):
                item.fail_transcription(
                    content_index=commit.content_index, error=error_detail(code, message)
                )
        for commit in response.segments:
            self._pending.release(commit)

    def close(self) -> None:
        """The session closes: the active response's requests are aborted, and so are
        open delegations (D1)."""
        if self.active is not None:
            self._abort_open(self.active)
        self.delegations.abort(self._out, None)
        self.preemption.discard()

    # --- interrupts (B11) ---------------------------------------------------------------

    def _cancel(self, response: Response, reason: str, *, force_cleared: bool = False) -> None:
        self._out.epoch += 1
        self._abort_open(response)
        self.by_id.clear_playing(self._out, force=response if force_cleared else None)
        self._fail_waiting_segments(response, ErrorCode.COMMIT_ABORTED, f"response {reason}")
        self.output.close(response)
        response.cancel(reason)
        self._couple()

    def interrupt(self, reason: str, response_id: str | None, *, clear: bool = False) -> bool:
        """Cancel (B11): the active response, else whatever may still be playing.
        Returns False when there was nothing to interrupt."""
        # first, so the cancelled response's end starts no waiting answer (D32)
        self.delegations.abort(self._out, response_id)
        self.preemption.discard()
        active = self.active
        if active is not None and response_id in (None, active.id):
            self._cancel(active, reason, force_cleared=clear)
            return True
        if self.by_id.may_be_playing(response_id):
            if active is None:  # the epoch fences requests: the active response's go on
                self._out.epoch += 1
            self.by_id.clear_playing(self._out, only=response_id)
            return True
        return False

    def cancel(self, response_id: str | None, event_id: str | None) -> None:
        """`response.cancel`: the named (or active) response, else what may be playing."""
        self.by_id.known(response_id, event_id)
        delegating = bool(self.delegations)  # dropping a delegation is a cancel too (D32)
        interrupted = self.interrupt("client_cancelled", response_id)
        if not interrupted and not delegating and response_id is None:
            raise RemoteProtocolError(
                "no response is active", code=ErrorCode.RESPONSE_NOT_ACTIVE, event_id=event_id
            )

    def clear_output(self, response_id: str | None, event_id: str | None) -> None:
        """`output_audio_buffer.clear`: always answered with `output_audio_buffer.cleared`."""
        self.by_id.known(response_id, event_id)
        interrupted = self.interrupt("output_audio_buffer_clear", response_id, clear=True)
        if not interrupted and response_id is None:
            self._out.emit(ev.OutputAudioBufferCleared())
