"""The embedded CPU backend, the default of `joyduplex serve`: Silero VAD (ONNX), Whisper
tiny.en (faster-whisper) or Moonshine tiny-en (onnxruntime), Piper TTS, and a
deterministic frame describer standing in for the vision-language model. Every weight
file ships inside a package; nothing is fetched.

    assets.py          where the shipped model files are; SHA-256 pin of the Silero ONNX
    failures.py        the one boundary translating foreign exceptions to BackendError
    vad.py             SileroVad: one shared onnxruntime session, batched over sessions
    asr.py             WhisperAsr: faster-whisper, int8, greedy, one utterance at a time
    moonshine.py       MoonshineAsr: Moonshine tiny-en on onnxruntime, line by line
    tts.py             PiperTts: sentence-by-sentence synthesis, soxr resampling
    frame_features.py  colour names, brightness and motion of camera frames (Pillow)
    describer.py       FrameDescriber: the stand-in for the VLM (not a VLM)
    backend.py         create_backend: the registry entry "cpu"

Nothing is imported here, so `import backends.cpu` loads no model library.
"""

from __future__ import annotations

__all__: list[str] = []
