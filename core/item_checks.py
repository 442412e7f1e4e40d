"""Validation and conversion of one `conversation.item.create`, before anything changes.

`check_item_create` either raises the client error the item deserves (its type, role, id,
and each content part: text, 16 kHz pcm16 audio, JPEG/PNG data URLs) or returns what the
session needs to add it: the wire content, the texts in content order, the one audio part
that still needs a transcript (B4), the decoded frames (B2: kept as raw bytes) and the
bytes it reserves against the pending-input cap (B13). The same kind of module as
`core.append_checks`.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from core.append_checks import is_image
from spec import events as ev
from spec.errors import ErrorCode, RemoteProtocolError
from spec.function_tools import TOOL_NAME
from spec.limits import MAX_FUNCTION_ARGUMENTS_BYTES, MAX_FUNCTION_OUTPUT_BYTES

if TYPE_CHECKING:
    from collections.abc import Container

__all__ = [
    "FunctionItemPlan",
    "ItemPlan",
    "check_function_item",
    "check_item_create",
    "decode_image_url",
]

#: the item types `conversation.item.create` takes besides `message` (B39)
FUNCTION_ITEM_TYPES = ("function_call", "function_call_output")

_DATA_URL = re.compile(r"^data:image/(jpeg|jpg|png);base64,(.*)$", re.DOTALL)
_TEXT_PARTS = ("input_text", "text", "output_text")
_AUDIO_PARTS = ("input_audio", "audio", "output_audio")


@dataclass(frozen=True, slots=True)
class ItemPlan:
    item_id: str | None
    role: str
    content: list[ev.ContentPart]
    texts: list[str | None]  # None marks the audio part whose transcript comes from ASR
    audio: bytes  # 16 kHz pcm16 still to transcribe (user items only), else b""
    audio_index: int  # the content index that transcript belongs to
    frames: list[bytes]

    @property
    def reserved(self) -> int:
        """Bytes held until the item's stage request is submitted (B13)."""
        return len(self.audio) + sum(len(f) for f in self.frames)


@dataclass(frozen=True, slots=True)
class FunctionItemPlan:
    """A `function_call` (history the client brings) or `function_call_output` item."""

    item_id: str | None
    type: str
    call_id: str
    name: str | None  # function_call only
    arguments: str | None  # function_call only
    output: str | None  # function_call_output only


def check_function_item(
    event: ev.ConversationItemCreate, live_ids: Container[str]
) -> FunctionItemPlan:
    """Validate a function item's fields (B39); whether its call id answers a call is the
    session's `FunctionCalls.check_output`.

    Raises:
        RemoteProtocolError: `bad_event` with the field path in `param`.
    """
    item = event.item
    eid = event.event_id
    if item.id is not None and item.id in live_ids:
        raise _refuse(
            f"item `{item.id}` already exists; delete it first", ErrorCode.BAD_EVENT, "item.id", eid
        )
    if not item.call_id:
        raise _refuse(
            f"a `{item.type}` item needs `call_id`", ErrorCode.BAD_EVENT, "item.call_id", eid
        )
    if item.content:
        raise _refuse(
            f"a `{item.type}` item has no content", ErrorCode.BAD_EVENT, "item.content", eid
        )
    if item.type == "function_call_output":
        if item.output is None:
            raise _refuse(
                "a function output needs `output`", ErrorCode.BAD_EVENT, "item.output", eid
            )
        if len(item.output.encode()) > MAX_FUNCTION_OUTPUT_BYTES:
            raise _refuse(
                f"a function output takes at most {MAX_FUNCTION_OUTPUT_BYTES} bytes",
                ErrorCode.BAD_EVENT,
                "item.output",
                eid,
            )
        return FunctionItemPlan(item.id, item.type, item.call_id, None, None, item.output)
    if item.name is None or not TOOL_NAME.fullmatch(item.name):
        raise _refuse(
            "a function call's `name` must be 1-64 letters, digits, `_` or `-`",
            ErrorCode.BAD_EVENT,
            "item.name",
            eid,
        )
    arguments = item.arguments or ""
    if len(arguments.encode()) > MAX_FUNCTION_ARGUMENTS_BYTES:
        raise _refuse(
            f"a function call's arguments take at most {MAX_FUNCTION_ARGUMENTS_BYTES} bytes",
            ErrorCode.BAD_EVENT,
            "item.arguments",
            eid,
        )
    return FunctionItemPlan(item.id, item.type, item.call_id, item.name, arguments, None)


def _refuse(message: str, code: ErrorCode, param: str, eid: str | None) -> RemoteProtocolError:
    return RemoteProtocolError(message, code=code, param=param, event_id=eid)


def decode_image_url(url: str | None, param: str, eid: str | None) -> bytes:
    """The bytes of a `data:image/(jpeg|png);base64,...` URL that holds a JPEG or PNG."""
    match = _DATA_URL.match(url or "")
    data = b""
    if match is not None:
        try:
            data = base64.b64decode(match.group(2), validate=True)
        except (binascii.Error, ValueError):
            data = b""
    if not is_image(data):
        raise _refuse(
            "`image_url` must be a data URL of a JPEG or PNG image",
            ErrorCode.INVALID_IMAGE,
            param,
            eid,
        )
    return data


def check_item_create(
    event: ev.ConversationItemCreate, live_ids: Container[str], *, max_parts: int
) -> ItemPlan:
    """Validate `event` against the live item ids and the content-part limit.

    Raises:
        RemoteProtocolError: `bad_event`, `bad_audio` or `invalid_image`, with the field path
            in `param`.
    """
    item = event.item
    eid = event.event_id
    if item.type != "message":
        raise _refuse(
            f"item type `{item.type}` is not supported; use `message`, `function_call` "
            "or `function_call_output`",
            ErrorCode.BAD_EVENT,
            "item.type",
            eid,
        )
    if not isinstance(item.role, str) or item.role not in ("user", "assistant", "system"):
        raise _refuse(
            f"item role `{item.role}` is not one of user, assistant, system",
            ErrorCode.BAD_EVENT,
            "item.role",
            eid,
        )
    if item.id is not None and item.id in live_ids:
        raise _refuse(
            f"item `{item.id}` already exists; delete it first", ErrorCode.BAD_EVENT, "item.id", eid
        )
    if len(item.content) > max_parts:
        raise _refuse(
            f"an item holds at most {max_parts} content parts, got {len(item.content)}",
            ErrorCode.BAD_EVENT,
            "item.content",
            eid,
        )
    texts: list[str | None] = []
    audio = b""
    audio_index = 0
    frames: list[bytes] = []
    content: list[ev.ContentPart] = []
    for i, part in enumerate(item.content):
        where = f"item.content[{i}]"
        if part.type in _TEXT_PARTS:
            if part.text is None:
                raise _refuse("a text part needs `text`", ErrorCode.BAD_EVENT, f"{where}.text", eid)
            texts.append(part.text)
            content.append(ev.ContentPart(type=part.type, text=part.text))
        elif part.type in _AUDIO_PARTS:
            data = part.audio or b""
            if len(data) % 2:
                raise _refuse(
                    "`audio` must be 16 kHz pcm16 (an even number of bytes)",
                    ErrorCode.BAD_AUDIO,
                    f"{where}.audio",
                    eid,
                )
            if part.transcript is not None:
                texts.append(part.transcript)
            elif data:
                if audio:
                    raise _refuse(
                        "at most one audio part may come without a transcript",
                        ErrorCode.BAD_EVENT,
                        f"{where}.transcript",
                        eid,
                    )
                audio, audio_index = data, i
                texts.append(None)  # its transcript comes from ASR
            content.append(ev.ContentPart(type=part.type, transcript=part.transcript))
        elif part.type == "input_image" and item.role == "user":
            frames.append(decode_image_url(part.image_url, f"{where}.image_url", eid))
            content.append(ev.ContentPart(type="input_image"))
        else:
            raise _refuse(
                f"content part type `{part.type}` is not supported for role `{item.role}`",
                ErrorCode.BAD_EVENT,
                f"{where}.type",
                eid,
            )
    return ItemPlan(
        item_id=item.id,
        role=item.role,
        content=content,
        texts=texts,
        audio=audio if item.role == "user" else b"",
        audio_index=audio_index,
        frames=frames,
    )
