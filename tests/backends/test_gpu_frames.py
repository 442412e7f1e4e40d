"""Frame decoding in the GPU backend: off the event loop, within a pixel limit, and a
typed `invalid_image` for anything it will not decode (a decompression bomb included).
Needs Pillow (skipped without it); no torch."""

from __future__ import annotations

import io
import struct
import threading
import zlib

import anyio
import pytest

from backends.base import InvalidImage, InvalidPromptContext, PromptContext, VlmRequest
from spec.errors import ErrorCode

Image = pytest.importorskip("PIL.Image")

from backends.gpu import frames as frames_module  # noqa: E402
from backends.gpu.frames import decode_frames  # noqa: E402


def _jpeg(width: int, height: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(out, format="JPEG")
    return out.getvalue()


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose header claims `width` x `height` (no pixel data: a bomb's first bytes)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")


def test_frames_are_decoded_and_scaled_to_max_side() -> None:
    [image] = decode_frames((_jpeg(1024, 512),), max_side=448)
    assert image.mode == "RGB" and max(image.size) == 448


@pytest.mark.parametrize("side", [13_000, 100_000])
def test_a_frame_over_the_pixel_limit_is_invalid_image_from_its_header(side: int) -> None:
    """Reproduction: a 13000x13000 PNG cost 2.7 s and 1.35 GB on the loop; a bomb
    surfaced as `engine_error`."""
    with pytest.raises(InvalidImage) as info:
        decode_frames((_jpeg(8, 8), _png_header(side, side)))
    assert info.value.code is ErrorCode.INVALID_IMAGE
    assert "frames[1]" in info.value.message
    assert isinstance(info.value, InvalidPromptContext)  # request-local: never accepted


def test_the_pixel_limit_is_configurable() -> None:
    with pytest.raises(InvalidImage, match="at most 10000 pixels"):
        decode_frames((_jpeg(200, 200),), max_pixels=10_000)
    assert len(decode_frames((_jpeg(100, 100),), max_pixels=10_000)) == 1


def test_an_undecodable_frame_is_invalid_image() -> None:
    with pytest.raises(InvalidImage):
        decode_frames((b"\xff\xd8" + b"not a jpeg",))


def test_the_vlm_stage_decodes_frames_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.backends.test_gpu_stages import FakeEngine, _collect, _vlm

    threads: list[int] = []
    real = frames_module.decode_frames

    def recording(*args: object, **kwargs: object) -> object:
        threads.append(threading.get_ident())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(frames_module, "decode_frames", recording)
    engine = FakeEngine(["</silence>"])
    context = PromptContext(system="Watch.", transcript="What is it?", frames=(_jpeg(64, 64),))

    async def main() -> None:
        loop_thread = threading.get_ident()
        await _collect(_vlm(engine), VlmRequest("r1", context))
        assert threads and threads[0] != loop_thread

    anyio.run(main)
    assert len(engine.submitted[0][1].images) == 1


def test_the_vlm_stage_refuses_a_bomb_before_submitting() -> None:
    from tests.backends.test_gpu_stages import FakeEngine, _collect, _vlm

    engine = FakeEngine(["</silence>"])
    context = PromptContext(system="W.", transcript="x", frames=(_png_header(50_000, 50_000),))
    with pytest.raises(InvalidImage):
        anyio.run(_collect, _vlm(engine), VlmRequest("r1", context))
    assert engine.submitted == []
