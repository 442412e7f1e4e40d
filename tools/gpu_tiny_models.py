"""Tiny random checkpoints of the GPU backend's architectures, built on the spot.

Nothing is downloaded: a byte-level BPE tokenizer is trained in-process on a few
sentences (with the Qwen special tokens), and Qwen3-VL / Qwen3-ASR models of a few
hundred thousand parameters are built from configs and saved with `save_pretrained`.
The layouts follow the real checkpoints (`model_type` qwen3_vl / qwen3_asr, the same
special tokens and placeholders), so the real loading and prompt code runs against them.
`head_dim` is 64 because vLLM's CPU attention rejects smaller heads.

The TTS checkpoint (`build_tiny_tts`, needs `qwen-tts-hf`) is a Qwen3-TTS-12Hz
CustomVoice layout: `config.json` (`qwen3_tts`, Talker + code predictor, speaker
"vivian"), `generation_config.json` (greedy), the text tokenizer, and
`speech_tokenizer/` (the 12 Hz tokenizer: Mimi encoder + Code2Wav decoder with the real
upsampling 8*5*4*3*2*2 = 1920 samples per codec frame, so 12.5 Hz -> 24 kHz).

    python tools/gpu_tiny_models.py /tmp/tiny      # writes /tmp/tiny/{vlm,asr,text[,tts]}
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "REAL_TTS",
    "SPECIAL_TOKENS",
    "TINY_TTS",
    "TtsSizes",
    "build_all",
    "build_tiny_asr",
    "build_tiny_text",
    "build_tiny_tts",
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
    "<tts_pad>",
    "<tts_text_bos>",
    "<tts_text_eod>",
]

_CORPUS = [
    "You are a real-time video streaming assistant observing a continuous camera feed.",
    "The last frame represents the current moment. Decide to stay silent, respond or delegate.",
    "[User Query (IMPORTANT — follow this instruction)] what do you see? Describe the red ball.",
    "Hello there, how can I help you today? The cat is on the table. language English",
    "system user assistant 0123456789 ,.!?;:'\"()[]-_ abcdefghijklmnopqrstuvwxyz",
    # the role names must end up as single tokens: Qwen3-TTS slices its prompt by token
    # position (`<|im_start|>assistant\n` is exactly 3 tokens)
    "assistant user system " * 8,
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


#: what the tiny VLM and ASR never generate: with no action marker and no end token, the
#: VLM's random text is a plain reply by the grammar (SPEAK, so end-to-end turns always
#: reach TTS) and the ASR's is a non-empty transcript; both run to their `max_tokens`.
#: transformers honours `suppress_tokens` in the generation config; vLLM does not, so the
#: weights say it too (`_quiet_special_rows`)
NEVER_GENERATED = tuple(SPECIAL_TOKENS)

#: std of the tiny models' output projection: ordinary logits ~ N(0, (2 * sqrt(128))^2),
#: so the best of a few hundred is far above the special tokens' 0
_LM_HEAD_STD = 2.0


def _quiet_special_rows(model: Any, ids: list[int]) -> None:
    """Give the never-generated tokens a zero output row and the others large ones.

    A random model's greedy or top-k pick then never lands on them, whatever the engine,
    without a sampling option the production code would not use. Qwen3-ASR ties its head
    to the input embeddings (as the real checkpoint, whose layout vLLM's loader expects):
    there the zero rows also blank those tokens' input embeddings, which a random model
    does not mind.
    """
    import torch

    head = model.get_output_embeddings().weight
    with torch.no_grad():
        head.normal_(0.0, _LM_HEAD_STD)
        head[ids] = 0.0


def _finish(model: Any, tokenizer: Any, out: Path, *, suppress: bool = True) -> Path:
    ids = _ids(tokenizer)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.generation_config.do_sample = False
    if suppress:
        never = [ids[tok] for tok in NEVER_GENERATED]
        model.generation_config.suppress_tokens = never
        _quiet_special_rows(model, never)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def build_tiny_vlm(
    out: Path,
    tokenizer: Any | None = None,
    *,
    text: dict[str, Any] | None = None,
    vision: dict[str, Any] | None = None,
) -> Path:
    """Tiny Qwen3-VL (`Qwen3VLForConditionalGeneration`) plus its image processor;
    `text` / `vision` override sizes of the decoder and the vision tower (a larger
    random model for CPU measurements, `tools/hf_prefill_reuse.py`)."""
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
            **(text or {}),
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
            **(vision or {}),
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
    return _finish(model, tokenizer, out, suppress=False)  # unchanged for the vLLM smoke


@dataclass(frozen=True)
class TtsSizes:
    """The sizes a Qwen3-TTS-12Hz checkpoint is built at (the layout never changes)."""

    codebook: int  # codec codes per codebook (the real one: 2048); control ids follow
    groups: int  # codebooks per frame (the real one: 16)
    talker: dict[str, int]
    predictor: dict[str, int]
    mrope_section: tuple[int, int, int]
    #: Code2Wav decoder overrides of the 12 Hz tokenizer's own (real) sizes
    decoder: dict[str, int]


_TINY_TTS_LAYER = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
}
TINY_TTS = TtsSizes(
    codebook=64,
    groups=4,
    talker={**_TINY_TTS_LAYER, "text_hidden_size": 64},
    predictor=_TINY_TTS_LAYER,
    mrope_section=(6, 5, 5),
    decoder={
        "codebook_dim": 32,
        "hidden_size": 32,
        "latent_dim": 32,
        "num_attention_heads": 2,
        "num_key_value_heads": 2,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "decoder_dim": 64,
    },
)
#: Qwen3-TTS-12Hz-1.7B-CustomVoice: a 28-layer 1.7B Talker (Qwen3-1.7B shapes), a 5-layer
#: code predictor for the 15 residual codebooks, the 12 Hz tokenizer's decoder as shipped
REAL_TTS = TtsSizes(
    codebook=2048,
    groups=16,
    talker={
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "text_hidden_size": 2048,
    },
    predictor={
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 5,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
    },
    mrope_section=(24, 20, 20),
    # the class defaults are the shipped decoder's sizes, except the codebook width,
    # which the shipped config sets and the class does not default
    decoder={"codebook_dim": 512},
)


def build_tiny_tts(
    out: Path,
    tokenizer: Any | None = None,
    *,
    sizes: TtsSizes = TINY_TTS,
    device: str = "cpu",
    dtype: str = "float32",
) -> Path:
    """A random Qwen3-TTS-12Hz CustomVoice (Talker + code predictor + 12 Hz tokenizer),
    tiny unless `sizes` says otherwise (`REAL_TTS`: built on `device` in `dtype`).

    The codec vocabulary is laid out as the real one: codes first, then the control ids,
    then padding up to `codebook + 1024` (the model suppresses the top 1024 ids except
    EOS while generating). Codebooks are filled with random values (their init is zero,
    which would decode to exact silence). The speech tokenizer's encoder (only voice
    cloning uses it) stays tiny at every size.
    """
    import importlib

    import torch
    from transformers import EncodecFeatureExtractor

    from backends.gpu.tts import import_qwen_tts

    import_qwen_tts()
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration
    from qwen_tts.core.tokenizer_12hz.configuration_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Config,
    )
    from qwen_tts.core.tokenizer_12hz.modeling_qwen3_tts_tokenizer_v2 import (
        Qwen3TTSTokenizerV2Model,
    )

    tokenizer = tokenizer or build_tokenizer()
    ids = _ids(tokenizer)
    role = tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    if len(role) != 3:
        raise RuntimeError("the tokenizer must encode `<|im_start|>assistant\\n` as 3 tokens")
    code, groups = sizes.codebook, sizes.groups
    mrope = {
        "rope_type": "default",
        "mrope_section": list(sizes.mrope_section),
        "interleaved": True,
    }
    talker = {
        **sizes.talker,
        "num_code_groups": groups,
        "vocab_size": code + 1024,
        "max_position_embeddings": 4096,
        "rope_scaling": mrope,
        "text_vocab_size": len(tokenizer),
        "codec_pad_id": code,
        "codec_bos_id": code + 1,
        "codec_eos_token_id": code + 2,
        "codec_think_id": code + 3,
        "codec_nothink_id": code + 4,
        "codec_think_bos_id": code + 5,
        "codec_think_eos_id": code + 6,
        "spk_id": {"vivian": code + 10},
        "spk_is_dialect": {"vivian": False},
        "codec_language_id": {"english": code + 20, "chinese": code + 21},
        "code_predictor_config": {
            **sizes.predictor,
            "num_code_groups": groups,
            "vocab_size": code,
            "max_position_embeddings": 64,
        },
    }
    config = Qwen3TTSConfig(
        talker_config=talker,
        tokenizer_type="qwen3_tts_tokenizer_12hz",
        tts_model_size="1b7",
        tts_model_type="custom_voice",
        im_start_token_id=ids["<|im_start|>"],
        im_end_token_id=ids["<|im_end|>"],
        tts_pad_token_id=ids["<tts_pad>"],
        tts_bos_token_id=ids["<tts_text_bos>"],
        tts_eos_token_id=ids["<tts_text_eod>"],
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3TTSForConditionalGeneration(config).to(getattr(torch, dtype)).eval()
    out.mkdir(parents=True, exist_ok=True)
    # written by hand as the published config.json is: the speaker encoder (Base models
    # only) keeps its own keys, and the Talker's mRoPE stays in `rope_scaling`
    document = config.to_dict()
    document["speaker_encoder_config"] = {"sample_rate": 24_000}
    document["talker_config"]["rope_scaling"] = mrope
    document["talker_config"].pop("rope_parameters", None)
    (out / "config.json").write_text(json.dumps(document, indent=2), encoding="utf-8")
    # `save_pretrained` cannot: qwen_tts declares `_tied_weights_keys` as a list, which
    # transformers 5 reads as a dict; the weights are not tied, so a plain file is it
    state = {name: tensor.contiguous().cpu() for name, tensor in model.state_dict().items()}
    save_file = importlib.import_module("safetensors.torch").save_file
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    generation = {
        "do_sample": False,
        "subtalker_dosample": False,
        "repetition_penalty": 1.0,
        "max_new_tokens": 24,
    }
    (out / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    tokenizer.save_pretrained(out)

    codec = Qwen3TTSTokenizerV2Config(
        encoder_config={
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "intermediate_size": 64,
            "codebook_size": code,
            "codebook_dim": 32,
            "num_filters": 8,
            "num_quantizers": groups,
            "num_semantic_quantizers": 1,
            "upsampling_ratios": [8, 6, 5, 4],
            "upsample_groups": 32,
            "vector_quantization_hidden_dimension": 32,
            "sampling_rate": 24_000,
            "frame_rate": 12.5,
        },
        decoder_config={**sizes.decoder, "codebook_size": code, "num_quantizers": groups},
        encoder_valid_num_quantizers=groups,
    )
    torch.manual_seed(1)
    with torch.device(device):
        speech = Qwen3TTSTokenizerV2Model(codec).eval()
    with torch.no_grad():
        for name, param in speech.named_parameters():
            if name.endswith("_codebook.embedding_sum"):
                param.normal_()
    speech.save_pretrained(out / "speech_tokenizer")
    EncodecFeatureExtractor(feature_size=1, sampling_rate=24_000).save_pretrained(
        out / "speech_tokenizer"
    )
    return out


def build_all(root: Path, *, tts: bool = False) -> dict[str, str]:
    """The tiny checkpoints under `root`; `tts=True` adds the TTS (needs `qwen-tts-hf`)."""
    tokenizer = build_tokenizer()
    paths = {
        "vlm": build_tiny_vlm(root / "vlm", tokenizer),
        "asr": build_tiny_asr(root / "asr", tokenizer),
        "text": build_tiny_text(root / "text", tokenizer),
    }
    if tts:
        paths["tts"] = build_tiny_tts(root / "tts", tokenizer)
    return {name: str(path) for name, path in paths.items()}


if __name__ == "__main__":
    import importlib.util

    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/joyduplex-tiny")
    print(json.dumps(build_all(root, tts=importlib.util.find_spec("qwen_tts") is not None)))
