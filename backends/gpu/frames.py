"""Raw camera frames -> decoded images, at the VLM handoff and nowhere earlier (B2).

Frames travel through the session as the client's JPEG/PNG bytes. They are decoded
here, right before a VLM submission, and scaled so the longer side is at most
`max_side` pixels (448 by default: 196 Qwen3-VL vision tokens per square frame).
Pillow is imported lazily.

Bounded work: a frame whose header claims more than `max_pixels` pixels (16 MP by
default) is refused from its header alone, before any pixel is decoded, as is anything
Pillow calls a decompression bomb: `InvalidImage` (`invalid_image`), a request-local
client error. JPEGs are decoded at the smallest DCT scale that still covers `max_side`
(`Image.draft`). `decode_frames_off_loop` runs the decoding in a worker thread, so a
large frame never stalls the event loop the sessions share.
"""

from __future__ import annotations

import functools
import io
from typing import Any

import anyio

from backends.base import InvalidImage

__all__ = ["DEFAULT_MAX_PIXELS", "DEFAULT_MAX_SIDE", "decode_frames", "decode_frames_off_loop"]

DEFAULT_MAX_SIDE = 448
#: the most pixels (width x height) a frame's header may claim: 4096 x 4096
DEFAULT_MAX_PIXELS = 4096 * 4096


def decode_frames(
    frames: tuple[bytes, ...],
    *,
    max_side: int = DEFAULT_MAX_SIDE,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> tuple[Any, ...]:
    """Decode and downscale (blocking: see `decode_frames_off_loop`).

    Raises:
        InvalidImage: a frame that is not a decodable JPEG/PNG, or that is over
            `max_pixels` (checked from its header, before decoding).
    """
    if not frames:
        return ()
    from PIL import Image, UnidentifiedImageError

    images = []
    for index, raw in enumerate(frames):
        where = f"prompt context `frames[{index}]`"
        try:
            opened = Image.open(io.BytesIO(raw))
            width, height = opened.size
            if width * height > max_pixels:
                raise InvalidImage(
                    f"{where} is {width}x{height} pixels; at most {max_pixels} pixels",
                    stage="vlm",
                )
            if opened.format == "JPEG":
                opened.draft("RGB", (max_side, max_side))
            opened.load()
        except (
            UnidentifiedImageError,
            Image.DecompressionBombError,
            Image.DecompressionBombWarning,  # where warnings are errors
            OSError,
            ValueError,
        ) as exc:
            raise InvalidImage(f"{where} is not a decodable JPEG/PNG image", stage="vlm") from exc
        image = opened.convert("RGB")
        if max(image.size) > max_side:
            image.thumbnail((max_side, max_side))
        images.append(image)
    return tuple(images)


async def decode_frames_off_loop(
    frames: tuple[bytes, ...],
    *,
    max_side: int = DEFAULT_MAX_SIDE,
    max_pixels: int = DEFAULT_MAX_PIXELS,
) -> tuple[Any, ...]:
    """`decode_frames` in a worker thread (no hop when there is nothing to decode)."""
    if not frames:
        return ()
    decode = functools.partial(decode_frames, max_side=max_side, max_pixels=max_pixels)
    return await anyio.to_thread.run_sync(decode, frames)
