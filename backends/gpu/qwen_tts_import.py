"""Importing `qwen_tts` (PyPI `qwen-tts-hf`) where its package does not import as it is,
and the dtype a TTS placement names: shared by the one-stream synthesizers (`tts.py`)
and the batched streams (`batched_tts.py`). See README "TTS on CPU" for the two
problems `import_qwen_tts` works around.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any, Final

__all__ = ["import_qwen_tts"]


def _torch_dtype(name: str, device: str = "cuda") -> Any:
    import torch

    if name == "auto":
        name = "float32" if device == "cpu" else "bfloat16"
    return getattr(torch, name)


_V1_VQ_MODULE: Final = "qwen_tts.core.tokenizer_25hz.vq.speech_vq"


class _NoV1Tokenizer:
    """Stands in for the 25 Hz tokenizer's VQ parts where torchaudio cannot be imported."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError(
            "the 25 Hz Qwen3-TTS tokenizer needs torchaudio, which cannot be imported here;"
            " the 12 Hz checkpoints this backend serves do not use it"
        )


def import_qwen_tts() -> Any:
    """Import `qwen_tts` (from `qwen-tts-hf`) with two narrow workarounds; returns it.

    1. `qwen_tts/__init__` imports the 25 Hz (V1) speech tokenizer unconditionally, whose
       VQ module imports torchaudio, sox and onnxruntime at import time. The 12 Hz
       checkpoints never build it. Where torchaudio cannot be imported (the CPU torch
       wheel has no matching torchaudio), only that one module is replaced by
       placeholders that raise if a 25 Hz model is ever built.
    2. `qwen_tts` registers a "default" RoPE initializer that reads `config.rope_theta`;
       transformers 5 lets every model's weight init look it up, and configs that keep
       the value only in `rope_parameters` (Mimi, inside the 12 Hz tokenizer; Qwen3-VL)
       then fail with AttributeError. The registered function is wrapped to fall back
       to `rope_parameters["rope_theta"]`; where `rope_theta` exists nothing changes.
    """
    if "qwen_tts" not in sys.modules and _V1_VQ_MODULE not in sys.modules:
        try:
            importlib.import_module("torchaudio")
        except (ImportError, OSError):
            stub = types.ModuleType(_V1_VQ_MODULE)
            stub.WhisperEncoderVQ = _NoV1Tokenizer  # type: ignore[attr-defined]
            stub.XVectorExtractor = _NoV1Tokenizer  # type: ignore[attr-defined]
            sys.modules[_V1_VQ_MODULE] = stub
    import qwen_tts
    from transformers import modeling_rope_utils

    registry = modeling_rope_utils.ROPE_INIT_FUNCTIONS
    original = registry.get("default")
    if original is not None and not getattr(original, "_joyduplex_wrapped", False):
        registry["default"] = _wrap_default_rope(original)
    return qwen_tts


def _wrap_default_rope(original: Any) -> Any:
    def default_rope(
        config: Any, device: Any = None, seq_len: int | None = None, layer_type: str | None = None
    ) -> tuple[Any, float]:
        try:
            return original(config, device, seq_len, layer_type)  # type: ignore[no-any-return]
        except AttributeError:
            import torch

            params = getattr(config, "rope_parameters", None) or {}
            if layer_type is not None and isinstance(params.get(layer_type), dict):
                params = params[layer_type]
            base = float(params["rope_theta"])
            partial = float(params.get("partial_rotary_factor", 1.0))
            head_dim = getattr(config, "head_dim", None) or (
                config.hidden_size // config.num_attention_heads
            )
            dim = int(head_dim * partial)
            steps = torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float)
            return 1.0 / (base ** (steps / dim)), 1.0

    default_rope._joyduplex_wrapped = True  # type: ignore[attr-defined]
    return default_rope
