"""Raw camera frames -> decoded images, at the VLM handoff and nowhere earlier (B2).

Frames travel through the session as the client's JPEG/PNG bytes. They are decoded
here, right before a VLM submission, and scaled so the longer side is at most
`max_side` pixels (448 by default: 196 Qwen3-VL vision tokens per square frame).
Pillow is imported lazily.
"""

from __future__ import annotations

import io
from typing import Any

from backends.base import InvalidPromptContext

__all__ = ["decode_frames"]

DEFAULT_MAX_SIDE = 448


def decode_frames(
    frames: tuple[bytes, ...], *, max_side: int = DEFAULT_MAX_SIDE
) -> tuple[Any, ...]:
    """Decode and downscale; an undecodable frame is a request-local client error."""
    if not frames:
        return ()
    from PIL import Image, UnidentifiedImageError

    images = []
    for index, raw in enumerate(frames):
        try:
            opened = Image.open(io.BytesIO(raw))
            opened.load()
        except (UnidentifiedImageError, OSError, ValueError) as exc:
            raise InvalidPromptContext(
                f"prompt context `frames[{index}]` is not a decodable JPEG/PNG image", stage="vlm"
            ) from exc
        image = opened.convert("RGB")
        if max(image.size) > max_side:
            image.thumbnail((max_side, max_side))
        images.append(image)
    return tuple(images)
