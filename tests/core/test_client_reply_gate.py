"""The reply gate of a WebRTC call (`client_reply_gate`, B21): which reply the call's
audio track may play after a barge-in, decided by `ClientProtocol` and carried out by
the host (`mute_reply` / `unmute_reply`)."""

from __future__ import annotations

from typing import Any

from core.client_protocol import ClientProtocol
from core.statemachines.client_outbox import Output


def _server(protocol: ClientProtocol, now: float, type_: str, **fields: Any) -> list[Output]:
    return protocol.server_event({"type": type_, **fields}, now)


def _call(mode: str = "vad", media: str = "tracks") -> ClientProtocol:
    protocol = ClientProtocol(mode, media=media)
    protocol.connected(0)
    _server(protocol, 1, "session.updated", session={})
    return protocol


def _start(protocol: ClientProtocol, now: float, response_id: str) -> list[Output]:
    _server(protocol, now, "response.created", response={"id": response_id})
    return _started(protocol, now + 1, response_id)


def _started(protocol: ClientProtocol, now: float, response_id: str) -> list[Output]:
    return _server(protocol, now, "output_audio_buffer.started", response_id=response_id)


def _gate(outputs: list[Output]) -> list[tuple[str, Any]]:
    return [
        (o["kind"], o["response_id"])
        for o in outputs
        if o["kind"] in ("mute_reply", "unmute_reply")
    ]


def _state(protocol: ClientProtocol) -> str:
    return str(protocol.snapshot()["reply_gate"]["state"])


def test_b21_a_barge_in_mutes_the_cut_reply_at_once() -> None:
    protocol = _call()
    assert _gate(_start(protocol, 10, "resp_1")) == []
    outputs = _server(protocol, 20, "input_audio_buffer.speech_started", item_id="item_3")
    assert _gate(outputs) == [("mute_reply", "resp_1")]
    # the page's `clear` comes first, the mute with it: the track is silent at once
    assert [o["kind"] for o in outputs][:2] == ["clear", "mute_reply"]
    assert _state(protocol) == "muted"


def test_b21_the_next_reply_start_unmutes() -> None:
    protocol = _call()
    _start(protocol, 10, "resp_1")
    _server(protocol, 20, "input_audio_buffer.speech_started", item_id="item_3")
    _server(protocol, 21, "output_audio_buffer.cleared", response_id="resp_1")
    assert _gate(_start(protocol, 30, "resp_2")) == [("unmute_reply", "resp_2")]
    assert _state(protocol) == "open"


def test_b21_the_cut_reply_late_started_keeps_it_muted() -> None:
    protocol = _call()
    _start(protocol, 10, "resp_1")
    _server(protocol, 20, "output_audio_buffer.cleared", response_id="resp_1")
    assert _gate(_started(protocol, 21, "resp_1")) == []
    assert _state(protocol) == "muted"


def test_b21_a_clear_of_every_reply_mutes_each_live_one_until_another_starts() -> None:
    protocol = _call()
    _start(protocol, 10, "resp_1")
    _start(protocol, 20, "resp_2")
    outputs = protocol.stop_reply(30)
    assert _gate(outputs) == [("mute_reply", "resp_1")]
    assert protocol.snapshot()["reply_gate"]["cut_replies"] == ["resp_1", "resp_2"]
    assert _gate(_started(protocol, 31, "resp_2")) == []
    assert _gate(_started(protocol, 32, "resp_1")) == []
    assert _gate(_start(protocol, 40, "resp_3")) == [("unmute_reply", "resp_3")]


def test_b21_a_cancelled_response_done_mutes_its_live_reply() -> None:
    protocol = _call()
    _start(protocol, 10, "resp_1")
    outputs = _server(
        protocol, 20, "response.done", response={"id": "resp_1", "status": "cancelled"}
    )
    assert _gate(outputs) == [("mute_reply", "resp_1")]


def test_b21_a_clear_of_a_reply_already_played_out_leaves_the_track_open() -> None:
    protocol = _call()
    _start(protocol, 10, "resp_1")
    _server(protocol, 20, "output_audio_buffer.stopped", response_id="resp_1")
    assert _gate(protocol.stop_reply(30)) == []
    assert _state(protocol) == "open"


def test_b21_a_websocket_call_never_gates_its_replies() -> None:
    protocol = _call(media="events")
    _server(protocol, 10, "response.created", response={"id": "resp_1"})
    _server(
        protocol, 11, "response.output_audio.delta", response_id="resp_1", item_id="i", delta="AAAA"
    )
    outputs = _server(protocol, 20, "input_audio_buffer.speech_started", item_id="item_3")
    assert [o["kind"] for o in outputs if o["kind"] == "clear"] == ["clear"]
    assert _gate(outputs) == []
    assert _state(protocol) == "open"
