"""The listening path's arithmetic, rewritten for speed, gives what the plain versions
give: the 24 kHz pcm16 conversion is the linear interpolation byte for byte, and the
backpressure check's idle size is what idle retention then keeps."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from core.audio import to_pcm16_16k
from core.outbox import Outbox
from core.statemachines.input_buffer import InputBuffer


def _linear_16k(audio: bytes, rate_hz: int) -> bytes:
    """Linear interpolation onto the 16 kHz grid, rounded half to even: the definition."""
    samples = np.frombuffer(audio, dtype="<i2").astype(np.float32)
    positions = np.arange(samples.size * 16_000 // rate_hz) * (rate_hz / 16_000)
    out = np.interp(positions, np.arange(samples.size), samples).astype(np.float32)
    return np.clip(np.rint(out), -32768, 32767).astype("<i2").tobytes()


_PCM16 = st.lists(st.integers(-32768, 32767), min_size=1, max_size=600).map(
    lambda xs: np.array(xs, dtype="<i2").tobytes()
)


@given(_PCM16)
def test_24k_pcm16_converts_to_the_linear_interpolation_byte_for_byte(audio: bytes) -> None:
    assert to_pcm16_16k(audio, "pcm16", 24_000) == _linear_16k(audio, 24_000)


def test_24k_pcm16_halves_round_to_even_at_the_extremes() -> None:
    for pair in ([1, 2], [-2, -1], [32767, 32766], [-32768, -32767], [32767, -32768]):
        audio = np.array([0, *pair] * 4, dtype="<i2").tobytes()
        assert to_pcm16_16k(audio, "pcm16", 24_000) == _linear_16k(audio, 24_000)


@given(
    st.lists(st.integers(1, 12_000).map(lambda n: n * 2), max_size=30),
    st.integers(0, 12_000).map(lambda n: n * 2),
)
@example(held=[20_000], added=0)  # one chunk longer than the preroll is kept whole
@example(held=[6_000, 6_000, 6_000], added=2)
def test_idle_size_after_an_append_is_what_idle_retention_keeps(
    held: list[int], added: int
) -> None:
    buffer = InputBuffer(Outbox())
    for size in held:
        buffer.add_audio(bytes(size))
    predicted = buffer.idle_bytes_after(added, [])
    buffer.add_audio(bytes(added))
    assert predicted == buffer.audio_bytes == sum(len(c) for c in buffer.chunks)
