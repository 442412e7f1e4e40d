"""`ResponseOutput`: what a session's responses put on the wire as they are produced
(B1-B4, B19, B38, B40): the assistant's message item, text deltas, TTS requests and audio
deltas, the function-call items the model opens (and the offered tools they are checked
against), and the part of the done-chain that closes them; with the terms a reply is made
in (voice, rate, modalities) that a preemptive reply must match (B35).

What it owns: nothing of its own; it writes through the outbox and the conversation for
`core.responses`, which decides when (a result reaches a response only through
`Responses`, which fences it first).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.prompt_input import (
    heard_text,
)
from core.statemachines.function_call import FunctionCall
from core.statemachines.speculation import ReplyTerms
from spec import events as ev
from spec.effects import (
    TTS,
    Abort,
    SubmitTts,
)
from spec.function_tools import delegation_arguments
from spec.tables import FunctionCallState, ItemState, PlaybackState, ResponseState

if TYPE_CHECKING:
    from collections.abc import Callable

    from core.conversation import Conversation
    from core.function_calls import FunctionCalls
    from core.outbox import Outbox
    from core.statemachines.response import Response
    from spec.function_tools import FunctionTool
    from spec.session_config import SessionConfig
    from spec.stage_results import (
        TtsAudio,
    )

__all__ = ["ResponseOutput"]


class ResponseOutput:
    __slots__ = ("_calls", "_config", "_items", "_out")

    def __init__(
        self,
        outbox: Outbox,
        items: Conversation,
        calls: FunctionCalls,
        config: Callable[[], SessionConfig],
    ) -> None:
        self._out = outbox
        self._items = items
        self._calls = calls  # a call opened here is registered until its output (B38)
        self._config = config  # the session's current configuration

    def reply_terms(self, modalities: tuple[str, ...]) -> ReplyTerms:
        """What a reply in `modalities` depends on besides its prompt (B35)."""
        config = self._config()
        return ReplyTerms(
            audio="audio" in modalities,
            sample_rate_hz=config.output_format.rate_hz,
            voice=config.voice,
            max_tokens=config.max_output_tokens,
        )

    def offered_tools(self) -> tuple[FunctionTool, ...]:
        """The function tools the model may call now (B38): none with `tool_choice: none`."""
        config = self._config()
        return () if config.tool_choice.mode == "none" else config.tools

    def delegation_tool(self) -> FunctionTool | None:
        """The offered function a delegated question becomes (B40), if any."""
        config = self._config()
        name = config.delegation_tool
        if not config.tool_choice.offers(name, self.offered_tools()):
            return None
        return next(t for t in config.tools if t.name == name)

    def call_delegation(self, response: Response, tool: FunctionTool, question: str) -> None:
        """The question as a call of `tool`, made at once: its arguments in one delta."""
        index = min((i for i in response.calls), default=0) - 1  # apart from the model's
        self.open_call(response, index, tool.name)
        call = response.calls[index]
        assert call is not None  # offered: checked by `delegation_tool`
        call.stream(delegation_arguments(tool, question))
        call.finish()

    def open_call(self, response: Response, index: int, name: str) -> None:
        """Open the call the model names at `index` (B38): its item, if the session offers
        `name`; else the index is kept as not offered."""
        config = self._config()
        if not config.tool_choice.offers(name, self.offered_tools()):
            response.open_call(index, None)  # a function the session does not offer
            return
        item = self._items.add(
            None,
            "assistant",
            [],
            response_id=response.id,
            type="function_call",
            call_id=self._out.next_id("call"),
            name=name,
            arguments="",
        )
        call = FunctionCall(
            self._out, item, response_id=response.id, output_index=len(response.outputs)
        )
        response.open_call(index, call)
        self._calls.add(call)
        self._out.emit(
            ev.ConversationItemAdded(item=item.wire(), previous_item_id=item.previous_item_id)
        )
        self._out.emit(
            ev.ResponseOutputItemAdded(
                response_id=response.id, output_index=call.output_index, item=item.wire()
            )
        )

    def assistant_item(self, response: Response, part: ev.ContentPart) -> None:
        item = self._items.add(response.item_id, "assistant", [part], response_id=response.id)
        response.speak(item, part.type)

    def show_text(self, response: Response, text: str) -> None:
        self.assistant_item(response, ev.ContentPart(type="output_text", text=""))
        response.show_text(text)
        self._out.emit(
            ev.ResponseOutputTextDelta(
                response_id=response.id,
                item_id=response.item_id,
                output_index=response.message_index,
                delta=text,
            )
        )

    def submit_tts(self, response: Response, text: str) -> None:
        if response.adopted_tts:
            if response.take_adopted_tts(text) is not None:  # its preemptive response's
                return
            # cut otherwise (never, with one sentence grammar): speak it afresh
            for request_id in response.drop_adopted_tts():
                self._out.effect(Abort(request_id, TTS, response.stage_key))
        request_id, seq = response.open_tts(text)
        config = self._config()
        self._out.effect(
            SubmitTts(
                request_id,
                response.stage_key,
                self._out.epoch,
                seq,
                text,
                config.output_format.rate_hz,
                config.voice,
            )
        )

    def audio(self, response: Response, result: TtsAudio, now_ms: int) -> None:
        """A piece of the reply's speech: its message item first, then the audio and its
        transcript as deltas."""
        if response.state is ResponseState.GENERATING:
            self.assistant_item(response, ev.ContentPart(type="output_audio", transcript=""))
        rate_hz = self._config().output_format.rate_hz
        duration = len(result.pcm16) / 2 / rate_hz * 1000
        text = response.add_audio(result.request_id, result.text, duration, now_ms)
        rid, iid, index = response.id, response.item_id, response.message_index
        self._out.emit(
            ev.ResponseOutputAudioDelta(
                response_id=rid, item_id=iid, output_index=index, delta=result.pcm16
            )
        )
        self._out.emit(
            ev.ResponseOutputAudioTranscriptDelta(
                response_id=rid, item_id=iid, output_index=index, delta=text
            )
        )

    def close(self, response: Response) -> None:
        """The part of the done-chain that closes the output items (upstream order); a
        call cut during its arguments ends `incomplete` (B38)."""
        for call in response.calls.values():
            if call is not None and call.state is FunctionCallState.ARGUMENTS:
                call.cut()
        item = response.item
        if item is None:
            return
        rid, iid, index = response.id, item.id, response.message_index
        part = item.content[0]
        if response.playback.state is PlaybackState.STREAMING:
            response.playback.finish()
        if part.type == "output_audio":
            if response.playback.state is PlaybackState.CLEARED:
                part.transcript = heard_text(response)  # B19: only what was heard
            transcript = part.transcript or ""
            self._out.emit(
                ev.ResponseOutputAudioDone(response_id=rid, item_id=iid, output_index=index)
            )
            self._out.emit(
                ev.ResponseOutputAudioTranscriptDone(
                    response_id=rid, item_id=iid, output_index=index, transcript=transcript
                )
            )
            done_part = ev.ContentPart(type="output_audio", transcript=transcript)
        else:
            self._out.emit(
                ev.ResponseOutputTextDone(
                    response_id=rid, item_id=iid, output_index=index, text=part.text or ""
                )
            )
            done_part = ev.ContentPart(type="output_text", text=part.text or "")
        self._out.emit(
            ev.ResponseContentPartDone(
                response_id=rid, item_id=iid, output_index=index, part=done_part
            )
        )
        self._out.emit(
            ev.ResponseOutputItemDone(
                response_id=rid, output_index=index, item=item.wire(completing=True)
            )
        )
        if item.state is ItemState.IN_PROGRESS:
            item.complete()
