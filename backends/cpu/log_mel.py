"""Whisper's log-mel spectrogram in numpy: the input features of Smart Turn v3.

Smart Turn v3 is a Whisper-tiny encoder with a classification head, exported to ONNX
without its feature extractor; it takes what `WhisperFeatureExtractor(chunk_length=8)`
makes of the last 8 s of a turn:

- the audio (16 kHz) is cut to its last 8 s, or zero-padded at the front to 8 s;
- the 128,000 samples are normalized to zero mean and unit variance (the padding
  included), in float32;
- a centred STFT: reflect padding of n_fft / 2 on both sides, a periodic Hann window of
  400 samples, hop 160, so 801 frames, of which the last is dropped (800 frames);
- power spectrum -> 80 mel bands (Slaney mel scale, 0-8 kHz, Slaney area normalization)
  -> log10 (floor 1e-10) -> clamped to 8 below its maximum -> (x + 4) / 4.

Written from that description; tests compare it with faster-whisper's Whisper feature
extractor (a different implementation of the same transform) and, when pipecat-ai is
installed, with the extractor Smart Turn ships with.
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

__all__ = [
    "HOP",
    "N_FFT",
    "N_FRAMES",
    "N_MELS",
    "SAMPLE_RATE_HZ",
    "WINDOW_SAMPLES",
    "last_window",
    "log_mel",
    "mel_filters",
]

SAMPLE_RATE_HZ = 16_000
N_FFT = 400
HOP = 160
N_MELS = 80
WINDOW_SAMPLES = 8 * SAMPLE_RATE_HZ
N_FRAMES = WINDOW_SAMPLES // HOP  # 800

_F_SP = 200.0 / 3  # Hz per mel in the linear part of the Slaney scale
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP  # 15
_LOG_STEP = np.log(6.4) / 27.0


def _hz_to_mel(hz: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    linear = hz / _F_SP
    logarithmic = _MIN_LOG_MEL + np.log(np.maximum(hz, _MIN_LOG_HZ) / _MIN_LOG_HZ) / _LOG_STEP
    return np.where(hz >= _MIN_LOG_HZ, logarithmic, linear)


def _mel_to_hz(mel: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    linear = mel * _F_SP
    logarithmic = _MIN_LOG_HZ * np.exp(_LOG_STEP * (mel - _MIN_LOG_MEL))
    return np.where(mel >= _MIN_LOG_MEL, logarithmic, linear)


@functools.cache
def mel_filters() -> npt.NDArray[np.float64]:
    """Triangular Slaney-normalized filters, shape [N_MELS, N_FFT // 2 + 1]."""
    top = _hz_to_mel(np.array([SAMPLE_RATE_HZ / 2]))[0]
    edges = _mel_to_hz(np.linspace(0.0, top, N_MELS + 2))  # band m spans edges[m : m + 3]
    bins = np.fft.rfftfreq(N_FFT, 1.0 / SAMPLE_RATE_HZ)
    left, centre, right = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins[None, :] - left) / (centre - left)
    falling = (right - bins[None, :]) / (right - centre)
    triangles = np.clip(np.minimum(rising, falling), 0.0, None)
    filters: npt.NDArray[np.float64] = triangles * (2.0 / (right - left))
    filters.setflags(write=False)
    return filters


@functools.cache
def _hann() -> npt.NDArray[np.float64]:
    n = np.arange(N_FFT)
    window: npt.NDArray[np.float64] = 0.5 - 0.5 * np.cos(2.0 * np.pi * n / N_FFT)
    window.setflags(write=False)
    return window


def last_window(pcm: npt.NDArray[np.floating]) -> npt.NDArray[np.float32]:
    """The last 8 s of `pcm` (16 kHz mono), zero-padded at the front to exactly 8 s."""
    audio = np.asarray(pcm, dtype=np.float32).reshape(-1)[-WINDOW_SAMPLES:]
    out = np.zeros(WINDOW_SAMPLES, dtype=np.float32)
    if len(audio):
        out[-len(audio) :] = audio
    return out


def log_mel(pcm: npt.NDArray[np.floating]) -> npt.NDArray[np.float32]:
    """Smart Turn's input features of a turn's audio: float32 [N_MELS, N_FRAMES]."""
    x = last_window(pcm)
    x = (x - x.mean()) / np.sqrt(x.var() + np.float32(1e-7))
    padded = np.pad(x.astype(np.float64), N_FFT // 2, mode="reflect")
    # frame k starts at k * HOP of the padded signal; the 801st frame is not used
    starts = np.arange(N_FRAMES) * HOP
    frames = padded[starts[:, None] + np.arange(N_FFT)[None, :]]
    power = np.abs(np.fft.rfft(frames * _hann(), axis=1)) ** 2  # [N_FRAMES, bins]
    mel = power @ mel_filters().T  # [N_FRAMES, N_MELS]
    log = np.log10(np.maximum(mel, 1e-10))
    log = np.maximum(log, log.max() - 8.0)
    features: npt.NDArray[np.float32] = ((log + 4.0) / 4.0).T.astype(np.float32)
    return features
