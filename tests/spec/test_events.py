"""Wire events: unions are complete, tags are unique and dotted, every event round-trips."""

from __future__ import annotations

import pathlib
import re
import typing

import msgspec
import pytest

import spec.events as events
from spec.events import ClientEvent, ClientEventT, ServerEvent, ServerEventT
from tests.spec.samples import minimal, samples
from transport import codec

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _concrete_subclasses(base: type) -> set[type]:
    out: set[type] = set()
    stack = list(base.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if not cls.__name__.startswith("_"):  # private bases are abstract
            out.add(cls)
    return out


@pytest.mark.parametrize(
    ("base", "union"), [(ClientEvent, ClientEventT), (ServerEvent, ServerEventT)]
)
def test_union_holds_exactly_the_concrete_subclasses(base: type, union: object) -> None:
    assert set(typing.get_args(union)) == _concrete_subclasses(base)


@pytest.mark.parametrize("union", [ClientEventT, ServerEventT])
def test_tags_are_explicit_unique_and_dotted(union: object) -> None:
    tags = [cls.__struct_config__.tag for cls in typing.get_args(union)]
    assert len(tags) == len(set(tags))
    for cls, tag in zip(typing.get_args(union), tags, strict=True):
        assert tag != cls.__name__
        assert tag == "error" or "." in tag


@pytest.mark.parametrize("event", samples(ClientEventT) + minimal(ClientEventT), ids=repr)
def test_every_client_event_round_trips(event: object) -> None:
    assert codec.decode_client_event(codec.encode_client_event(event)) == event  # type: ignore[arg-type]


@pytest.mark.parametrize("event", samples(ServerEventT) + minimal(ServerEventT), ids=repr)
def test_every_server_event_round_trips(event: object) -> None:
    assert codec.decode_server_event(codec.encode_server_event(event)) == event  # type: ignore[arg-type]


def test_every_documented_event_name_is_in_a_union() -> None:
    # the events the protocol promises, as docs/architecture.md section 5 lists them
    client = [
        "session.update",
        "input_audio_buffer.append",
        "input_audio_buffer.commit",
        "input_audio_buffer.clear",
        "conversation.item.create",
        "conversation.item.delete",
        "conversation.item.retrieve",
        "conversation.item.truncate",
        "response.create",
        "response.cancel",
        "output_audio_buffer.clear",
        "playback.ack",
        "session.heartbeat",
        "session.close",
        "session.resume",
        "session.event_ack",
    ]
    server = [
        "session.created",
        "session.updated",
        "session.closed",
        "session.resumed",
        "session.replaced",
        "session.resync_required",
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "input_audio_buffer.cleared",
        "conversation.item.added",
        "conversation.item.done",
        "conversation.item.deleted",
        "conversation.item.retrieved",
        "conversation.item.truncated",
        "conversation.item.input_audio_transcription.delta",
        "conversation.item.input_audio_transcription.completed",
        "conversation.item.input_audio_transcription.failed",
        "response.created",
        "response.output_item.added",
        "response.output_item.done",
        "response.content_part.added",
        "response.content_part.done",
        "response.output_audio.delta",
        "response.output_audio.done",
        "response.output_audio_transcript.delta",
        "response.output_audio_transcript.done",
        "response.output_text.delta",
        "response.output_text.done",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.done",
        "response.listen",
        "output_audio_buffer.cleared",
        "playback.acknowledged",
        "rate_limits.updated",
        "error",
    ]
    client_tags = {c.__struct_config__.tag for c in typing.get_args(ClientEventT)}
    server_tags = {c.__struct_config__.tag for c in typing.get_args(ServerEventT)}
    assert set(client) <= client_tags
    assert set(server) <= server_tags
    # and the document lists exactly these, in this order
    text = (ROOT / "docs/architecture.md").read_text()
    listed = text.split("The events the protocol promises:", 1)[1].split("\n\n", 2)[1]
    client_part, server_part = listed.split("- server:")
    assert re.findall(r"`([\w.]+)`", client_part) == client
    assert re.findall(r"`([\w.]+)`", server_part) == server


def test_audio_is_base64_on_the_wire_and_bytes_in_python() -> None:
    raw = b'{"type":"input_audio_buffer.append","audio":"AAEC","video_frames":["/9j/"]}'
    event = codec.decode_client_event(raw)
    assert isinstance(event, events.InputAudioBufferAppend)
    assert event.audio == b"\x00\x01\x02"
    assert event.video_frames == [b"\xff\xd8\xff"]


def test_unknown_fields_on_a_known_client_event_are_ignored() -> None:
    raw = b'{"type":"input_audio_buffer.commit","final":true,"hint":{"x":1},"vendor":2}'
    assert codec.decode_client_event(raw) == events.InputAudioBufferCommit()


def test_upstream_commit_alias_asks_for_a_response_by_default() -> None:
    alias = codec.decode_client_event(b'{"type":"input.commit"}')
    assert isinstance(alias, events.InputAudioBufferCommit)
    assert alias.wants_response(False) is True
    plain = events.InputAudioBufferCommit(response_create=True)
    assert plain.wants_response(False) is True
    assert events.InputAudioBufferCommit().wants_response(False) is False
    assert events.InputAudioBufferCommit(create_response=False).wants_response(True) is False


def test_server_events_omit_defaults_but_keep_event_id() -> None:
    body = msgspec.json.decode(
        codec.encode_server_event(events.InputAudioBufferCleared(event_id="event_1"))
    )
    assert body == {"type": "input_audio_buffer.cleared", "event_id": "event_1"}


def _message(role: str) -> events.ConversationItem:
    part = events.ContentPart(type="input_text", text="hi")
    return events.ConversationItem(id="item_1", role=role, content=[part])


@pytest.mark.parametrize(
    ("event", "role"),
    [
        (events.ConversationItemAdded(item=_message("user")), "user"),
        (events.ConversationItemDone(item=_message("user")), "user"),
        (events.ConversationItemRetrieved(item=_message("user")), "user"),
        (events.ResponseOutputItemAdded(response_id="r", item=_message("assistant")), "assistant"),
        (events.ResponseOutputItemDone(response_id="r", item=_message("assistant")), "assistant"),
    ],
    ids=lambda e: type(e).__name__ if isinstance(e, ServerEvent) else e,
)
def test_a_message_item_on_the_wire_says_its_object_type_and_role(
    event: ServerEventT, role: str
) -> None:
    item = msgspec.json.decode(codec.encode_server_event(event))["item"]
    assert (item["object"], item["type"], item["role"]) == ("realtime.item", "message", role)


def test_a_response_on_the_wire_says_its_object_status_and_message_items() -> None:
    response = events.Response(id="resp_1", output=[_message("assistant")])
    body = msgspec.json.decode(codec.encode_server_event(events.ResponseDone(response=response)))
    assert (body["response"]["object"], body["response"]["status"]) == (
        "realtime.response",
        "in_progress",
    )
    assert body["response"]["output"][0]["type"] == "message"
    empty = events.ResponseCreated(response=events.Response(id="resp_2"))
    assert msgspec.json.decode(codec.encode_server_event(empty))["response"]["output"] == []


def test_a_function_item_on_the_wire_has_a_type_and_no_role_or_content() -> None:
    call = events.ConversationItem(
        id="item_2", type="function_call", role=msgspec.UNSET, call_id="c1", name="f"
    )
    body = msgspec.json.decode(codec.encode_server_event(events.ConversationItemAdded(item=call)))
    assert body["item"]["type"] == "function_call"
    assert "role" not in body["item"] and "content" not in body["item"]


def test_an_item_a_client_creates_without_type_or_role_is_a_user_message() -> None:
    raw = b'{"type":"conversation.item.create","item":{"content":[]}}'
    event = codec.decode_client_event(raw)
    assert isinstance(event, events.ConversationItemCreate)
    assert (event.item.type, event.item.role) == ("message", "user")
