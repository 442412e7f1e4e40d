"""The embedded CPU backend, the default of `joyduplex serve`: Silero VAD (ONNX), Whisper
tiny.en (faster-whisper), Piper TTS, and a deterministic frame describer standing in for
the vision-language model. Every weight file ships inside a package; nothing is fetched.
"""

from __future__ import annotations

__all__: list[str] = []
