"""Seeded hostile client frames for the wire fuzz and the hostile-session tests (B28).

`WireMutator(seed)` yields `Frame`s: every client event type of spec/events/client.py
with valid fields, then mutated: fields of the wrong type, out-of-range numbers (1e306,
-1, "NaN", a bare NaN token, huge integers), missing required fields, unknown types,
unknown extra fields, deep nesting (~1,200 levels), oversized strings and frames,
invalid, odd-length or garbage base64 audio and images, binary frames, invalid UTF-8,
empty messages, and events out of order (a commit without audio, `response.cancel` of
unknown ids, a truncate of an unknown item, playback acks from the future).

The same seed gives the same frames, so a failing run is reproduced from its seed.
Two events are never generated valid: `session.close` (it would end the session: the
fuzz sends it last, itself) and `session.heartbeat` (the fuzz's own heartbeats pace the
flood, so every ack must be one of them); both still appear mutated.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from transport.codec import CLIENT_EVENT_TYPES

__all__ = ["KINDS", "NEVER_VALID", "Frame", "WireMutator"]

#: event types the mutator never sends valid (see the module docstring)
NEVER_VALID = frozenset({"session.close", "session.heartbeat"})

JPEG = b"\xff\xd8\xff\xe0" + b"frame".ljust(60, b".")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _tone(ms: int, rng: random.Random) -> bytes:
    n = ms * 16
    phase = rng.random() * 6
    return (np.sin(np.arange(n) / 5.0 + phase) * 8000).astype("<i2").tobytes()


@dataclass(frozen=True, slots=True)
class Frame:
    """One websocket message: text (str) or binary (bytes), and what it tests."""

    kind: str
    data: str | bytes
    type: str | None  # the client event type it was made from, if any

    def describe(self, limit: int = 400) -> str:
        """The frame for a failure message (long frames are cut)."""
        text = self.data if isinstance(self.data, str) else repr(self.data)
        cut = f"... ({len(self.data)} bytes)" if len(text) > limit else ""
        return f"[{self.kind}, {self.type}] {text[:limit]}{cut}"


@dataclass
class WireMutator:
    """Hostile frames from one seed; `item_ids` and `response_ids` are ids the server
    announced on this connection (the test adds them), so some events aim at real ones."""

    seed: int
    max_event_bytes: int = 1024 * 1024
    item_ids: list[str] = field(default_factory=list)
    response_ids: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self._audio = [_tone(ms, self.rng) for ms in (20, 100, 300)]
        self._valid: dict[str, Callable[[], dict[str, Any]]] = {
            "session.update": self._session_update,
            "input_audio_buffer.append": self._append,
            "input_audio_buffer.commit": self._commit,
            "input.commit": self._commit,
            "input_audio_buffer.clear": dict,
            "conversation.item.create": self._item_create,
            "conversation.item.delete": self._item_ref,
            "conversation.item.retrieve": self._item_ref,
            "conversation.item.truncate": self._truncate,
            "response.create": self._response_create,
            "response.cancel": self._response_ref,
            "output_audio_buffer.clear": self._response_ref,
            "playback.ack": self._playback_ack,
            "audio.playback_ack": self._playback_ack,
            "session.heartbeat": dict,
            "session.close": lambda: {"reason": "fuzz"},
            "session.resume": self._resume,
            "session.event_ack": lambda: {"server_event_seq": self.rng.randrange(0, 10**6)},
        }
        missing = CLIENT_EVENT_TYPES - set(self._valid)
        assert not missing, f"the mutator does not know {sorted(missing)}"
        self._types = sorted(self._valid)
        self._sendable = [t for t in self._types if t not in NEVER_VALID]
        self._kinds: list[tuple[str, Callable[[], Frame], int]] = [
            # weights per 10,000 frames: oversized frames are rare, they cost megabytes
            ("valid", self._valid_frame, 2800),
            ("wrong_type", self._wrong_type, 1200),
            ("out_of_range", self._out_of_range, 1000),
            ("missing_required", self._missing_required, 600),
            ("unknown_type", self._unknown_type, 500),
            ("extra_fields", self._extra_fields, 600),
            ("deep_nesting", self._deep_nesting, 90),
            ("oversized", self._oversized, 10),
            ("bad_audio", self._bad_audio, 800),
            ("bad_image", self._bad_image, 500),
            ("binary", self._binary, 400),
            ("invalid_utf8", self._invalid_utf8, 200),
            ("empty", self._empty, 200),
            ("out_of_order", self._out_of_order, 900),
            ("not_an_object", self._not_an_object, 200),
        ]
        self._weights = [w for _, _, w in self._kinds]

    # --- the stream --------------------------------------------------------------------

    def next(self) -> Frame:
        [(_, make, _)] = self.rng.choices(self._kinds, self._weights)
        return make()

    def valid(self, event_type: str) -> Frame:
        """A valid event of `event_type` (for coverage: every type is sent valid once)."""
        return Frame(
            "valid", self._json({"type": event_type, **self._valid[event_type]()}), event_type
        )

    # --- valid fields ------------------------------------------------------------------

    def _pick(self, ids: list[str], prefix: str) -> str:
        if ids and self.rng.random() < 0.7:
            return self.rng.choice(ids[-32:])
        return f"{prefix}_{self.rng.randrange(10**9)}"

    def _session_update(self) -> dict[str, Any]:
        choices: list[dict[str, Any]] = [
            {"instructions": "be brief " * self.rng.randrange(1, 20)},
            {"turn_detection": None},
            {"turn_detection": {"type": "server_vad", "silence_duration_ms": 200}},
            {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}},
            {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}},
            {"output_modalities": ["audio"]},
            {"idle_timeout_s": 600},
            {"extra_body": {"k": [1, {"a": "b"}]}},
            {"max_output_tokens": self.rng.choice([1, 64, "inf"])},
            {"voice": "alloy"},
        ]
        return {"session": self.rng.choice(choices)}

    def _append(self) -> dict[str, Any]:
        event: dict[str, Any] = {"audio": _b64(self.rng.choice(self._audio))}
        if self.rng.random() < 0.3:
            event["video_frames"] = [_b64(JPEG)]
        if self.rng.random() < 0.1:
            event = {"video_frames": [_b64(JPEG)]}
        return event

    def _commit(self) -> dict[str, Any]:
        return self.rng.choice([{}, {"create_response": True}, {"create_response": False}])

    def _item_create(self) -> dict[str, Any]:
        parts = [{"type": "input_text", "text": "hello"}]
        if self.rng.random() < 0.3:
            parts.append(
                {"type": "input_image", "image_url": "data:image/jpeg;base64," + _b64(JPEG)}
            )
        event: dict[str, Any] = {"item": {"type": "message", "role": "user", "content": parts}}
        if self.rng.random() < 0.3:
            event["previous_item_id"] = self._pick(self.item_ids, "item")
        return event

    def _item_ref(self) -> dict[str, Any]:
        return {"item_id": self._pick(self.item_ids, "item")}

    def _truncate(self) -> dict[str, Any]:
        return {
            "item_id": self._pick(self.item_ids, "item"),
            "content_index": self.rng.choice([0, 0, 1]),
            "audio_end_ms": self.rng.randrange(0, 5000),
        }

    def _response_create(self) -> dict[str, Any]:
        return self.rng.choice(
            [
                {},
                {"response": {"instructions": "short"}},
                {"response": {"output_modalities": ["audio"]}},
            ]
        )

    def _response_ref(self) -> dict[str, Any]:
        return self.rng.choice([{}, {"response_id": self._pick(self.response_ids, "resp")}])

    def _playback_ack(self) -> dict[str, Any]:
        event: dict[str, Any] = {"played_ms": self.rng.choice([0, 100.5, 1000, 10**7])}
        if self.rng.random() < 0.8:
            event["response_id"] = self._pick(self.response_ids, "resp")
        if self.rng.random() < 0.5:
            event["item_id"] = self._pick(self.item_ids, "item")
        return event

    def _resume(self) -> dict[str, Any]:
        return {"session_id": f"sess_{self.rng.randrange(10**9)}", "resume_token": "x"}

    # --- helpers -----------------------------------------------------------------------

    def _json(self, event: dict[str, Any]) -> str:
        if self.rng.random() < 0.5:
            event = {**event, "event_id": f"fuzz_{self.rng.randrange(10**9)}"}
        return json.dumps(event, allow_nan=True)

    def _base(self, types: list[str] | None = None) -> tuple[str, dict[str, Any]]:
        event_type = self.rng.choice(types or self._types)
        return event_type, {"type": event_type, **self._valid[event_type]()}

    def _valid_frame(self) -> Frame:
        event_type, event = self._base(self._sendable)
        return Frame("valid", self._json(event), event_type)

    # --- mutations ---------------------------------------------------------------------

    def _odd_value(self) -> Any:
        return self.rng.choice(
            [
                None,
                True,
                0,
                -1,
                1.5,
                "",
                "x",
                [],
                {},
                [1, 2],
                {"a": 1},
                10**30,
                -(10**30),
                "NaN",
                1e306,
                -1e306,
                "\u0000",
                "\ud7ff" * 3,
                [[[]]],
            ]
        )

    def _wrong_type(self) -> Frame:
        event_type, event = self._base()
        fields = [k for k in event if k != "type"] or ["event_id"]
        key = self.rng.choice(fields)
        event[key] = self._odd_value()
        if isinstance(event[key], str) and (key == "event_id" or event_type in NEVER_VALID):
            event[key] = 12345  # a string would leave it valid
        return Frame("wrong_type", json.dumps(event), event_type)

    def _out_of_range(self) -> Frame:
        value = self.rng.choice([1e306, -1e306, -1, -0.5, "NaN", 10**40, -(10**40), 2**63, 2**64])
        choices: list[dict[str, Any]] = [
            {"type": "playback.ack", "played_ms": value},
            {"type": "audio.playback_ack", "played_ms": 1, "committed_ms": value},
            {"type": "conversation.item.truncate", "item_id": "item_x", "audio_end_ms": value},
            {
                "type": "conversation.item.truncate",
                "item_id": "item_x",
                "audio_end_ms": 1,
                "content_index": value,
            },
            {"type": "session.event_ack", "server_event_seq": value},
            {
                "type": "session.resume",
                "session_id": "sess_x",
                "last_received_server_event_seq": value,
            },
            {"type": "input_audio_buffer.append", "audio": "", "sample_rate_hz": value},
            {"type": "input_audio_buffer.append", "audio": "", "duration_ms": value},
            {"type": "input_audio_buffer.append", "audio": "", "speech_probability": value},
            {"type": "session.update", "session": {"idle_timeout_s": value}},
            {"type": "session.update", "session": {"sample_rate_hz": value}},
            {"type": "session.update", "session": {"max_output_tokens": value}},
            {
                "type": "session.update",
                "session": {"audio": {"input": {"format": {"type": "audio/pcm", "rate": value}}}},
            },
            {
                "type": "session.update",
                "session": {"turn_detection": {"type": "server_vad", "silence_duration_ms": value}},
            },
            {
                "type": "session.update",
                "session": {"turn_detection": {"type": "server_vad", "threshold": value}},
            },
        ]
        event = self.rng.choice(choices)
        text = json.dumps(event)
        if self.rng.random() < 0.2:  # a bare NaN / Infinity token: not JSON
            text = text.replace(
                json.dumps(value), self.rng.choice(["NaN", "Infinity", "-Infinity"]), 1
            )
        return Frame("out_of_range", text, event["type"])

    _REQUIRED: ClassVar[dict[str, str]] = {
        "conversation.item.create": "item",
        "conversation.item.delete": "item_id",
        "conversation.item.retrieve": "item_id",
        "conversation.item.truncate": "item_id",
        "playback.ack": "played_ms",
        "audio.playback_ack": "played_ms",
        "session.resume": "session_id",
        "session.event_ack": "server_event_seq",
    }

    def _missing_required(self) -> Frame:
        event_type, event = self._base(sorted(self._REQUIRED))
        if self.rng.random() < 0.2:
            event.pop("type")
        else:
            event.pop(self._REQUIRED[event_type], None)
            if event_type == "conversation.item.truncate" and self.rng.random() < 0.5:
                event.pop("audio_end_ms", None)
        return Frame("missing_required", json.dumps(event), event_type)

    def _unknown_type(self) -> Frame:
        event_type = self.rng.choice(
            [
                "nope",
                "",
                "session.updated",
                "response.done",
                "error",
                "SESSION.UPDATE",
                "input_audio_buffer.append ",
                5,
                None,
                [],
                {"a": 1},
                "x" * 300,
            ]
        )
        event = {"type": event_type, "audio": "AAAA"}
        return Frame("unknown_type", json.dumps(event), None)

    def _extra_fields(self) -> Frame:
        event_type, event = self._base(self._sendable)
        for _ in range(self.rng.randrange(1, 4)):
            event[f"x_{self.rng.randrange(1000)}"] = self._odd_value()
        return Frame("extra_fields", json.dumps(event), event_type)

    def _deep_nesting(self) -> Frame:
        depth = self.rng.choice([1200, 1200, 3000, 20, 200])
        # shallow nesting is valid JSON: only types that may be valid get it
        event_type = self.rng.choice(self._types if depth >= 1200 else self._sendable)
        opener, closer = self.rng.choice([("[", "]"), ('{"a":', "}")])
        nested = opener * depth + "1" + closer * depth
        where = self.rng.choice(["junk", "session", "item", "extra_body"])
        if where == "extra_body":
            text = '{"type":"session.update","session":{"extra_body":{"k":' + nested + "}}}"
        else:
            text = '{"type":' + json.dumps(event_type) + ',"' + where + '":' + nested + "}"
        return Frame("deep_nesting", text, event_type)

    def _oversized(self) -> Frame:
        size = self.rng.choice([64 * 1024, self.max_event_bytes // 2, self.max_event_bytes + 100])
        big = "x" * size
        choices = [
            {"type": "session.update", "session": {"instructions": big}},
            {
                "type": "conversation.item.create",
                "item": {"content": [{"type": "input_text", "text": big}]},
            },
            {"type": "response.create", "response": {"instructions": big}},
            {"type": "conversation.item.delete", "item_id": big},
            {"type": "response.cancel", "event_id": big},
            {"type": "input_audio_buffer.append", "audio": _b64(b"\x00" * (size // 4 * 3))},
        ]
        event = self.rng.choice(choices)
        return Frame("oversized", json.dumps(event), str(event["type"]))

    def _bad_audio(self) -> Frame:
        audio: Any = self.rng.choice(
            [
                "!!",
                "A",
                "AAA",
                "AAAAA=",
                "====",
                "\u00e9\u00e9\u00e9\u00e9",
                _b64(b"\x01\x02\x03"),
                _b64(b"\x01"),
                _b64(JPEG),
                5,
                [1, 2],
                {"a": "AAAA"},
                None,
                _b64(self.rng.randbytes(self.rng.randrange(1, 3000))),
                "A" * 7 + "=",
            ]
        )
        event: dict[str, Any] = {"type": "input_audio_buffer.append", "audio": audio}
        if self.rng.random() < 0.3:
            event["sample_rate_hz"] = self.rng.choice([8000, 24000, 44100, 7, 96000])
        if self.rng.random() < 0.2:
            event["format"] = self.rng.choice(["pcm_f32le", "g711_ulaw", "mp3", {"type": "x"}])
        return Frame("bad_audio", json.dumps(event), event["type"])

    def _bad_image(self) -> Frame:
        def frame() -> Any:
            return self.rng.choice(
                [
                    "!!",
                    "",
                    _b64(b"not an image"),
                    _b64(PNG_MAGIC + b"junk"),
                    _b64(b"\xff\xd8"),
                    _b64(self.rng.randbytes(200)),
                    7,
                    None,
                    {"b": 1},
                    "AAA",
                ]
            )

        count = self.rng.choice([1, 1, 2, 3, 5])
        frames = [frame() for _ in range(count)]
        if self.rng.random() < 0.3:
            frames = self.rng.choice([{"a": 1}, "AAAA", 3])  # not a list
        event: dict[str, Any] = {"type": "input_audio_buffer.append", "video_frames": frames}
        if self.rng.random() < 0.5:
            event["audio"] = _b64(self._audio[0])
        if self.rng.random() < 0.2:
            part = {
                "type": "input_image",
                "image_url": self.rng.choice(
                    ["data:image/jpeg;base64,!!", "http://127.0.0.1/x.png", "data:,", 5]
                ),
            }
            event = {"type": "conversation.item.create", "item": {"content": [part]}}
        return Frame("bad_image", json.dumps(event), str(event["type"]))

    def _binary(self) -> Frame:
        choice = self.rng.randrange(4)
        if choice == 0:
            data = self.rng.randbytes(self.rng.randrange(1, 512))
        elif choice == 1:  # a valid event in a binary frame
            _, event = self._base(self._sendable)
            data = json.dumps(event).encode()
        elif choice == 2:
            data = b"\x00" * self.rng.randrange(1, 64)
        else:
            data = b"\x89PNG" + self.rng.randbytes(64)
        return Frame("binary", data, None)

    def _invalid_utf8(self) -> Frame:
        junk = self.rng.choice(
            [b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80"]
        )
        event_type = self.rng.choice(self._types)
        data = (
            b'{"type":"'
            + event_type.encode()
            + b'","event_id":"'
            + junk
            + b'","item_id":"'
            + junk
            + b'"}'
        )
        return Frame("invalid_utf8", data, event_type)  # binary: a text frame would be closed 1007

    def _empty(self) -> Frame:
        return Frame("empty", self.rng.choice(["", b"", " ", "{}", "null", "\n"]), None)

    def _not_an_object(self) -> Frame:
        return Frame(
            "not_an_object",
            self.rng.choice(["[]", "1", '"x"', "true", "[{}]", "{", '{"type":', "}"]),
            None,
        )

    def _out_of_order(self) -> Frame:
        choices: list[dict[str, Any]] = [
            {"type": "input_audio_buffer.clear"},
            {"type": "input_audio_buffer.commit"},  # often without audio after a clear
            {"type": "input.commit", "create_response": True},
            {"type": "response.cancel", "response_id": f"resp_{self.rng.randrange(10**6)}"},
            {"type": "response.cancel"},
            {"type": "output_audio_buffer.clear", "response_id": "resp_unknown"},
            {
                "type": "conversation.item.truncate",
                "item_id": f"item_{self.rng.randrange(10**6)}",
                "audio_end_ms": 10,
            },
            {
                "type": "conversation.item.truncate",
                "item_id": self._pick(self.item_ids, "item"),
                "audio_end_ms": 10**7,
            },
            {
                "type": "playback.ack",
                "played_ms": 10**9,
                "response_id": self._pick(self.response_ids, "resp"),
            },
            {
                "type": "playback.ack",
                "played_ms": 10**9,
                "response_id": self._pick(self.response_ids, "resp"),
                "item_id": "item_other",
                "truncate": True,
            },
            {"type": "audio.playback_ack", "played_ms": 5, "committed_ms": 10**9},
            {"type": "response.create"},
            {"type": "session.resume", "session_id": "sess_unknown"},
            {"type": "session.event_ack", "server_event_seq": 10**12},
            {"type": "conversation.item.retrieve", "item_id": "item_gone"},
        ]
        event = self.rng.choice(choices)
        return Frame("out_of_order", self._json(event), str(event["type"]))


KINDS: tuple[str, ...] = tuple(kind for kind, _, _ in WireMutator(0)._kinds)
