"""A tiny fake realtime server on 127.0.0.1 that replays canned event sequences.

The real server is not needed to prove the client: this one answers each client event
type with a canned list of server events (typed spec events, encoded by the real codec,
or raw frames for what a client must survive), records every frame and the handshake
headers it received, and can refuse handshakes without a token. The tests in this module
prove the canned sequences are valid wire events in the documented order.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request
from websockets.http11 import Response as HttpResponse

from spec.events import (
    ContentPart,
    ConversationItem,
    ConversationItemAdded,
    ConversationItemDone,
    Error,
    ErrorDetail,
    InputAudioBufferCommitted,
    InputAudioTranscriptionCompleted,
    RateLimitsUpdated,
    Response,
    ResponseContentPartAdded,
    ResponseContentPartDone,
    ResponseCreated,
    ResponseDone,
    ResponseListen,
    ResponseOutputAudioDelta,
    ResponseOutputAudioDone,
    ResponseOutputAudioTranscriptDelta,
    ResponseOutputAudioTranscriptDone,
    ResponseOutputItemAdded,
    ResponseOutputItemDone,
    ResponseStatusDetails,
    ServerEventT,
    SessionClosed,
    SessionCreated,
    SessionHeartbeatAck,
    SessionObject,
    SessionUpdated,
)
from transport.codec import decode_server_event, encode_server_event

#: one reply audio chunk per transcript word (100 ms at 24 kHz each, distinct bytes)
REPLY_WORDS = ["Hello", " there", " friend."]
REPLY_AUDIO = [bytes([i + 1]) * 4800 for i in range(len(REPLY_WORDS))]
USER_TRANSCRIPT = "scripted transcript"

Frame = ServerEventT | str  # a typed event, or a raw text frame sent as is
Answer = Callable[[dict[str, Any]], list[Frame]]


def session_object() -> SessionObject:
    return SessionObject(id="sess_1")


def spoken_turn(
    response_id: str = "resp_1", user_item: str = "item_1", reply_item: str = "item_2"
) -> list[Frame]:
    """A committed spoken turn answered with speech, in the documented order."""
    audio_part = ContentPart(type="output_audio")
    done_part = ContentPart(type="output_audio", transcript="".join(REPLY_WORDS))
    rid, iid = response_id, reply_item
    frames: list[Frame] = [
        ConversationItemAdded(
            item=ConversationItem(
                id=user_item, status="in_progress", content=[ContentPart(type="input_audio")]
            )
        ),
        InputAudioBufferCommitted(item_id=user_item, client_event_id=None),
        ResponseCreated(response=Response(id=response_id)),
        InputAudioTranscriptionCompleted(item_id=user_item, transcript=USER_TRANSCRIPT),
        ConversationItemDone(item=ConversationItem(id=user_item, status="completed")),
        ConversationItemAdded(item=ConversationItem(id=reply_item, role="assistant")),
        ResponseOutputItemAdded(
            response_id=response_id, item=ConversationItem(id=reply_item, role="assistant")
        ),
        ResponseContentPartAdded(response_id=rid, item_id=iid, part=audio_part),
    ]
    for word, audio in zip(REPLY_WORDS, REPLY_AUDIO, strict=True):
        frames.append(ResponseOutputAudioDelta(response_id=rid, item_id=iid, delta=audio))
        frames.append(ResponseOutputAudioTranscriptDelta(response_id=rid, item_id=iid, delta=word))
    done_item = ConversationItem(id=reply_item, role="assistant", status="completed")
    frames += [
        ResponseOutputAudioDone(response_id=rid, item_id=iid),
        ResponseOutputAudioTranscriptDone(
            response_id=rid, item_id=iid, transcript="".join(REPLY_WORDS)
        ),
        ResponseContentPartDone(response_id=rid, item_id=iid, part=done_part),
        ResponseOutputItemDone(response_id=response_id, item=done_item),
        ConversationItemDone(item=done_item),
        ResponseDone(response=Response(id=response_id, status="completed", output=[done_item])),
        RateLimitsUpdated(),
    ]
    return frames


def quiet_turn(user_item: str = "item_1") -> list[Frame]:
    """A commit without speech: no response, `response.listen` without a response id."""
    return [
        ConversationItemAdded(item=ConversationItem(id=user_item, status="completed")),
        InputAudioBufferCommitted(item_id=user_item, no_response=True),
        ConversationItemDone(item=ConversationItem(id=user_item, status="completed")),
        ResponseListen(reason="silence_or_noise"),
    ]


def failed_turn(response_id: str = "resp_1") -> list[Frame]:
    """A response whose stage failed after it was created."""
    return [
        InputAudioBufferCommitted(item_id="item_1"),
        ResponseCreated(response=Response(id=response_id)),
        error("stage_failed", "scripted StageFailed in vlm", error_type="server_error"),
        ResponseDone(
            response=Response(
                id=response_id,
                status="failed",
                status_details=ResponseStatusDetails(type="failed", reason="stage_failed"),
            )
        ),
    ]


def error(
    code: str,
    message: str,
    *,
    param: str | None = None,
    event_id: str | None = None,
    error_type: str = "invalid_request_error",
) -> Error:
    return Error(
        error=ErrorDetail(
            type=error_type, code=code, message=message, param=param, event_id=event_id
        )
    )


def default_answers() -> dict[str, Answer]:
    """update -> updated, commit -> a spoken turn, heartbeat -> ack, close -> closed."""
    return {
        "session.update": lambda _event: [SessionUpdated(session=session_object())],
        "input_audio_buffer.commit": lambda _event: spoken_turn(),
        "session.heartbeat": lambda _event: [SessionHeartbeatAck()],
        "session.close": lambda event: [SessionClosed(reason=event.get("reason", ""))],
    }


@dataclass
class FakeRealtimeServer:
    """Answers client events by type; `url` is set while it runs."""

    answers: dict[str, Answer] = field(default_factory=default_answers)
    greeting: list[Frame] = field(
        default_factory=lambda: [SessionCreated(session=session_object())]
    )
    required_token: str | None = None
    received: list[dict[str, Any]] = field(default_factory=list)
    headers: list[Headers] = field(default_factory=list)
    url: str = ""
    _sent: int = 0

    def received_of(self, type_name: str) -> list[dict[str, Any]]:
        return [event for event in self.received if event.get("type") == type_name]

    def _check_token(self, connection: ServerConnection, request: Request) -> HttpResponse | None:
        self.headers.append(request.headers)
        if self.required_token is None:
            return None
        if request.headers.get("Authorization") == f"Bearer {self.required_token}":
            return None
        return connection.respond(HTTPStatus.UNAUTHORIZED, "missing or bad token\n")

    async def _send(self, connection: ServerConnection, frames: list[Frame]) -> None:
        for frame in frames:
            if isinstance(frame, str):
                await connection.send(frame)
                continue
            self._sent += 1
            frame.event_id = f"event_{self._sent}"
            await connection.send(encode_server_event(frame).decode())

    async def _serve(self, connection: ServerConnection) -> None:
        await self._send(connection, self.greeting)
        async for message in connection:
            event = json.loads(message)
            self.received.append(event)
            answer = self.answers.get(event.get("type", ""))
            if answer is not None:
                await self._send(connection, answer(event))
            if event.get("type") == "session.close":
                await connection.close()
                return

    @asynccontextmanager
    async def running(self) -> AsyncIterator[FakeRealtimeServer]:
        async with serve(self._serve, "127.0.0.1", 0, process_request=self._check_token) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            self.url = f"ws://127.0.0.1:{port}/v1/realtime"
            yield self


# --- the canned sequences are real wire events ----------------------------------------


def _types(frames: list[Frame]) -> list[str]:
    return [
        str(type(decode_server_event(encode_server_event(f))).__struct_config__.tag)
        for f in frames
        if not isinstance(f, str)
    ]


def test_spoken_turn_follows_the_documented_first_audio_and_completion_order() -> None:
    types = _types(spoken_turn())
    assert types[:3] == [
        "conversation.item.added",
        "input_audio_buffer.committed",
        "response.created",
    ]
    audio = types.index("response.output_audio.delta")
    assert types[audio - 3 : audio] == [
        "conversation.item.added",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-7:] == [
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
        "rate_limits.updated",
    ]


def test_quiet_and_failed_turns_decode() -> None:
    assert _types(quiet_turn())[-1] == "response.listen"
    assert _types(failed_turn())[-2:] == ["error", "response.done"]
