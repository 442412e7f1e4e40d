"""Tiny random checkpoints of the GPU backend's architectures, built on the spot.

Nothing is downloaded: a byte-level BPE tokenizer is trained in-process on a few
sentences (with the Qwen special tokens), and Qwen3-VL / Qwen3-ASR models of a few
hundred thousand parameters are built from configs and saved with `save_pretrained`.
The layouts follow the real checkpoints (`model_type` qwen3_vl / qwen3_asr, the same
special tokens and placeholders), so the real loading and prompt code runs against them.
`head_dim` is 64 because vLLM's CPU attention rejects smaller heads.

    python tools/gpu_tiny_models.py /tmp/tiny      # writes /tmp/tiny/{vlm,asr,text}
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "SPECIAL_TOKENS",
    "build_all",
    "build_tiny_asr",
    "build_tiny_text",
    "build_tiny_vlm",
    "build_tokenizer",
]

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<|audio_start|>",
    "<|audio_end|>",
    "<|audio_pad|>",
    "<asr_text>",
    "</asr_text>",
    "</silence>",
    "</response>",
    "</delegation>",
]

_CORPUS = [
    "You are a real-time video streaming assistant observing a continuous camera feed.",
    "The last frame represents the current moment. Decide to stay silent, respond or delegate.",
    "[User Query (IMPORTANT — follow this instruction)] what do you see? Describe the red ball.",
    "Hello there, how can I help you today? The cat is on the table. language English",
    "system user assistant 0123456789 ,.!?;:'\"()[]-_ abcdefghijklmnopqrstuvwxyz",
]

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] %}{% if c['type'] == 'text' %}{{ c['text'] }}"
    "{% elif c['type'] == 'audio' %}<|audio_start|><|audio_pad|><|audio_end|>"
    "{% elif c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def build_tokenizer(vocab_size: int = 400) -> Any:
    """A byte-level BPE `PreTrainedTokenizerFast` with the Qwen special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    core.train_from_iterator(_CORPUS * 4, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=CHAT_TEMPLATE,
        extra_special_tokens={
            "audio_token": "<|audio_pad|>",
            "audio_bos_token": "<|audio_start|>",
            "audio_eos_token": "<|audio_end|>",
            "image_token": "<|image_pad|>",
            "video_token": "<|video_pad|>",
            "vision_bos_token": "<|vision_start|>",
            "vision_eos_token": "<|vision_end|>",
        },
    )


def _ids(tokenizer: Any) -> dict[str, int]:
    return {tok: int(tokenizer.convert_tokens_to_ids(tok)) for tok in SPECIAL_TOKENS}


def _text_config(tokenizer: Any, **extra: Any) -> dict[str, Any]:
    ids = _ids(tokenizer)
    return {
        "vocab_size": len(tokenizer),
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 64,
        "max_position_embeddings": 4096,
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
        "bos_token_id": ids["<|endoftext|>"],
        **extra,
    }


def _finish(model: Any, tokenizer: Any, out: Path) -> Path:
    ids = _ids(tokenizer)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.generation_config.do_sample = False
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def build_tiny_vlm(out: Path, tokenizer: Any | None = None) -> Path:
    """Tiny Qwen3-VL (`Qwen3VLForConditionalGeneration`) plus its image processor."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    tokenizer = tokenizer or build_tokenizer()
    ids = _ids(tokenizer)
    torch.manual_seed(0)
    config = Qwen3VLConfig(
        text_config=_text_config(
            tokenizer,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10000.0,
                "mrope_section": [12, 10, 10],
                "mrope_interleaved": True,
            },
        ),
        vision_config={
            "depth": 1,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_heads": 1,
            "patch_size": 16,
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": 128,
            "num_position_embeddings": 256,
            "deepstack_visual_indexes": [0],
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    model = Qwen3VLForConditionalGeneration(config).eval()
    path = _finish(model, tokenizer, out)
    processor = Qwen2VLImageProcessorPil(
        patch_size=16, merge_size=2, temporal_patch_size=2, min_pixels=32 * 32, max_pixels=448 * 448
    )
    processor.save_pretrained(path)
    return path


def build_tiny_asr(out: Path, tokenizer: Any | None = None) -> Path:
    """Tiny Qwen3-ASR (`Qwen3ASRForConditionalGeneration`) plus its feature extractor."""
    import torch
    from transformers import (
        Qwen3ASRConfig,
        Qwen3ASRFeatureExtractor,
        Qwen3ASRForConditionalGeneration,
    )

    tokenizer = tokenizer or build_tokenizer()
    ids = _ids(tokenizer)
    torch.manual_seed(0)
    config = Qwen3ASRConfig(
        audio_config={
            "num_mel_bins": 128,
            "encoder_layers": 1,
            "encoder_attention_heads": 2,
            "encoder_ffn_dim": 128,
            "d_model": 64,
            "output_dim": 128,
            "downsample_hidden_size": 32,
            "max_source_positions": 1500,
        },
        text_config=_text_config(tokenizer, tie_word_embeddings=True),
        audio_token_id=ids["<|audio_pad|>"],
        pad_token_id=ids["<|endoftext|>"],
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
    )
    model = Qwen3ASRForConditionalGeneration(config).eval()
    path = _finish(model, tokenizer, out)
    Qwen3ASRFeatureExtractor().save_pretrained(path)
    return path


def build_tiny_text(out: Path, tokenizer: Any | None = None) -> Path:
    """Tiny Qwen3 text model (`Qwen3ForCausalLM`): the text-only fallback for vLLM on CPU."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = tokenizer or build_tokenizer()
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(Qwen3Config(**_text_config(tokenizer))).eval()
    return _finish(model, tokenizer, out)


def build_all(root: Path) -> dict[str, str]:
    tokenizer = build_tokenizer()
    paths = {
        "vlm": build_tiny_vlm(root / "vlm", tokenizer),
        "asr": build_tiny_asr(root / "asr", tokenizer),
        "text": build_tiny_text(root / "text", tokenizer),
    }
    return {name: str(path) for name, path in paths.items()}


if __name__ == "__main__":
    print(json.dumps(build_all(Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/joyduplex-tiny"))))
