"""The GPU backend: Qwen3-ASR, JoyAI-VL-Interaction and Qwen3-TTS stages on vLLM and torch
with CUDA Graphs, placed across two GPUs. The only package that imports torch or vllm,
and only lazily, inside the functions that need them.
"""

from __future__ import annotations

__all__: list[str] = []
