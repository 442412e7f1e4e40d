"""What one camera frame shows, measured without any model: colour names, brightness, motion.

A JPEG or PNG is decoded with Pillow (JPEGs at a reduced scale via `draft`, which is
several times faster than a full decode), shrunk to 64x64 and converted to HSV. Each
pixel gets one of eleven colour names from fixed hue/saturation/value rules; the shares
of those names are the frame's colour histogram. Brightness is the mean luma in [0, 1].
Motion between two frames is the mean absolute luma difference of their thumbnails.
This is the measurement half of the frame describer (see `describer.py`).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = [
    "ANALYSIS_SIZE",
    "COLOUR_NAMES",
    "MAX_FRAME_PIXELS",
    "FrameFeatures",
    "analyse_frame",
    "colour_names_of",
    "is_supported_image",
    "motion_between",
]

#: every colour name a frame can be given, in index order of `colour_names_of`
COLOUR_NAMES = (
    "red",
    "orange",
    "yellow",
    "green",
    "blue",
    "purple",
    "pink",
    "white",
    "grey",
    "black",
    "brown",
)
_INDEX = {name: i for i, name in enumerate(COLOUR_NAMES)}

#: frames are shrunk to this size before measuring
ANALYSIS_SIZE = (64, 64)
#: larger images are refused before decoding (a 4K frame has 8.3 M pixels)
MAX_FRAME_PIXELS = 40_000_000
#: colours with at least this share of the frame are reported
MIN_COLOUR_SHARE = 0.15

_JPEG_MAGIC = b"\xff\xd8\xff"
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True, slots=True)
class FrameFeatures:
    """Measurements of one frame."""

    colours: tuple[tuple[str, float], ...]  # (name, share of pixels), largest first
    brightness: float  # mean luma, 0 (black) .. 1 (white)
    luma: npt.NDArray[np.float32]  # the 64x64 luma thumbnail, for motion

    @property
    def dominant(self) -> str:
        """The colour covering most of the frame."""
        return self.colours[0][0]


def is_supported_image(data: bytes) -> bool:
    """True for JPEG and PNG, the two frame formats sessions accept."""
    return data.startswith(_JPEG_MAGIC) or data.startswith(_PNG_MAGIC)


def colour_names_of(hsv: npt.NDArray[np.float32]) -> npt.NDArray[np.intp]:
    """Index into `COLOUR_NAMES` for each pixel of an HSV array scaled to [0, 1]."""
    hue = hsv[..., 0] * 360.0
    sat = hsv[..., 1]
    val = hsv[..., 2]
    names = np.full(hue.shape, _INDEX["blue"], dtype=np.intp)
    # chromatic hue bands first; later rules override earlier ones
    names[(hue < 15) | (hue >= 345)] = _INDEX["red"]
    names[(hue >= 15) & (hue < 40)] = _INDEX["orange"]
    names[(hue >= 40) & (hue < 70)] = _INDEX["yellow"]
    names[(hue >= 70) & (hue < 165)] = _INDEX["green"]
    names[(hue >= 255) & (hue < 290)] = _INDEX["purple"]
    names[(hue >= 290) & (hue < 345)] = _INDEX["pink"]
    names[((hue < 15) | (hue >= 345)) & (sat < 0.5) & (val > 0.7)] = _INDEX["pink"]  # light red
    names[(hue >= 10) & (hue < 45) & (val < 0.6)] = _INDEX["brown"]  # dark orange
    grey = sat < 0.2
    names[grey] = _INDEX["grey"]
    names[grey & (val > 0.8)] = _INDEX["white"]
    names[val < 0.18] = _INDEX["black"]
    return names


def analyse_frame(data: bytes) -> FrameFeatures:
    """Decode one JPEG/PNG frame and measure it.

    Raises:
        ValueError: not a JPEG or PNG, or too many pixels.
        OSError: Pillow cannot decode it (truncated or corrupt).
    """
    from PIL import Image

    if not is_supported_image(data):
        raise ValueError("not a JPEG or PNG image")
    try:
        opened = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        raise ValueError(str(exc)) from exc
    with opened as image:
        width, height = image.size
        if width * height > MAX_FRAME_PIXELS:
            raise ValueError(f"{width}x{height} image exceeds {MAX_FRAME_PIXELS} pixels")
        image.draft("RGB", (ANALYSIS_SIZE[0] * 2, ANALYSIS_SIZE[1] * 2))
        small = image.convert("RGB").resize(ANALYSIS_SIZE, Image.Resampling.BILINEAR)
    hsv = np.asarray(small.convert("HSV"), dtype=np.float32) / 255.0
    luma = np.asarray(small.convert("L"), dtype=np.float32) / 255.0
    counts = np.bincount(colour_names_of(hsv).ravel(), minlength=len(COLOUR_NAMES))
    shares = counts / counts.sum()
    order = np.argsort(-shares, kind="stable")
    colours = tuple(
        (COLOUR_NAMES[i], float(shares[i]))
        for rank, i in enumerate(order)
        if rank == 0 or shares[i] >= MIN_COLOUR_SHARE
    )
    return FrameFeatures(colours=colours, brightness=float(luma.mean()), luma=luma)


def motion_between(before: FrameFeatures, after: FrameFeatures) -> float:
    """Mean absolute luma change between two frames, 0 (identical) .. 1."""
    return float(np.abs(after.luma - before.luma).mean())
