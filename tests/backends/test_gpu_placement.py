from __future__ import annotations

from pathlib import Path

import pytest

from backends.gpu.placement import (
    PlacementError,
    default_placement,
    load_placement,
    parse_placement,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "backends" / "gpu" / "placement.example.toml"


def test_default_is_vlm_on_gpu0_asr_and_tts_on_gpu1() -> None:
    placement = load_placement(None)
    assert placement.vlm.device == 0
    assert placement.asr.device == placement.tts.device == 1
    assert placement.vlm.model == "jdopensource/JoyAI-VL-Interaction-Preview"
    assert placement.asr.model == "Qwen/Qwen3-ASR-1.7B"
    assert all(not placement.stage(s).enforce_eager for s in ("asr", "vlm", "tts"))
    assert placement.vlm.cuda_graphs


def test_single_gpu_layout_fits_one_device() -> None:
    placement = parse_placement({"gpus": 1})
    assert set(placement.devices()) == {0}
    assert sum(s.gpu_memory_utilization for s in placement.devices()[0]) <= 0.95


GIB = 2**30
H200_GIB = 139  # what an H200 gives CUDA
#: estimates from the model shapes, bf16 (README section 3)
WEIGHTS_GIB = {"vlm": 16.8, "asr": 4.5}
KV_PER_TOKEN = {"vlm": 36 * 8 * 128 * 2 * 2, "asr": 28 * 8 * 128 * 2 * 2}
CONTEXT_TOKENS = {"vlm": 8192, "asr": 2048}  # a session's resident context
HEADROOM_GIB = {"vlm": 5.0, "asr": 3.0}  # activations, encoder profile, graphs, CUDA context


@pytest.mark.parametrize(("gpus", "card_gib"), [(1, H200_GIB), (2, H200_GIB), (2, 79)])
def test_defaults_hold_32_sessions_on_one_h200_or_two_80_gb_gpus(gpus: int, card_gib: int) -> None:
    """The arithmetic of README section 3, "Sized for 32 sessions": each vLLM engine's
    fraction of the card holds its weights, 32 resident contexts' KV and its headroom."""
    placement = default_placement(gpus)
    for name in ("asr", "vlm"):
        stage = placement.stage(name)
        assert stage.max_num_seqs == 32
        assert stage.cuda_graph_capture_sizes == (1, 2, 4, 8, 16, 24, 32)
        assert stage.max_num_batched_tokens is not None
        assert stage.max_num_seqs <= stage.max_num_batched_tokens <= 4096
        kv_gib = 32 * CONTEXT_TOKENS[name] * KV_PER_TOKEN[name] / GIB
        need = WEIGHTS_GIB[name] + kv_gib + HEADROOM_GIB[name]
        assert stage.gpu_memory_utilization * card_gib >= need, (name, need)
    assert 32 * 8192 * KV_PER_TOKEN["vlm"] == 36 * GIB
    for stages in placement.devices().values():
        assert sum(s.gpu_memory_utilization for s in stages) <= 0.95


def test_shipped_example_loads() -> None:
    placement = load_placement(EXAMPLE)
    assert placement.vlm.cuda_graph_capture_sizes == (1, 2, 4, 8, 16, 24, 32)
    sizing = ("gpu_memory_utilization", "max_num_seqs", "cuda_graph_capture_sizes")
    for name in ("asr", "vlm", "tts"):  # the example spells out the defaults it shows
        shipped, default = placement.stage(name), default_placement(2).stage(name)
        assert [getattr(shipped, k) for k in sizing] == [getattr(default, k) for k in sizing]
        assert shipped.max_num_batched_tokens == default.max_num_batched_tokens
        assert not shipped.device_audit
    assert placement.tts.speaker == "Vivian"
    assert placement.tts.language == "Auto"


def test_file_values_override_defaults(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(
        'gpus = 1\n[vlm]\nmodel = "/m/joy"\nenforce_eager = true\n'
        "cuda_graph_capture_sizes = [4, 1, 2, 2]\n",
        encoding="utf-8",
    )
    placement = load_placement(path)
    assert placement.vlm.model == "/m/joy"
    assert placement.vlm.enforce_eager and not placement.vlm.cuda_graphs
    assert placement.vlm.cuda_graph_capture_sizes == (1, 2, 4)
    assert placement.asr == default_placement(1).asr


@pytest.mark.parametrize(
    ("doc", "key"),
    [
        ({"vlm": {"gpu_memory_utilization": 1.5}}, "vlm.gpu_memory_utilization"),
        ({"vlm": {"gpu_memory_utilization": "lots"}}, "vlm.gpu_memory_utilization"),
        ({"asr": {"device": -1}}, "asr.device"),
        ({"asr": {"device": True}}, "asr.device"),
        ({"tts": {"max_model_len": 0}}, "tts.max_model_len"),
        ({"vlm": {"cuda_graph_capture_sizes": []}}, "vlm.cuda_graph_capture_sizes"),
        ({"vlm": {"cuda_graph_capture_sizes": [1, 64]}}, "vlm.cuda_graph_capture_sizes"),
        ({"vlm": {"dtype": "int3"}}, "vlm.dtype"),
        ({"vlm": {"colour": "red"}}, "vlm.colour"),
        ({"asr": {"speaker": "Vivian"}}, "asr.speaker"),
        ({"tts": {"max_images": 2}}, "tts.max_images"),
        ({"vlm": {"context_budget_tokens": 16384}}, "vlm.context_budget_tokens"),
        ({"gpus": 3}, "gpus"),
        ({"extra": {}}, "extra"),
        ({"vlm": 5}, "vlm"),
        ({"device_audit": "yes"}, "device_audit"),
        ({"tts": {"device_audit": 1}}, "tts.device_audit"),
        ({"asr": {"device_audit": True}}, "asr.device_audit"),  # vLLM: another process
        ({"vlm": {"max_num_seqs": 64, "max_num_batched_tokens": 32}}, "vlm.max_num_batched_tokens"),
        (
            {"vlm": {"max_num_seqs": 8, "cuda_graph_capture_sizes": [16]}},
            "vlm.cuda_graph_capture_sizes",
        ),
    ],
)
def test_validation_errors_name_the_key(doc: dict[str, object], key: str) -> None:
    with pytest.raises(PlacementError, match=f"`{key}`"):
        parse_placement(doc)


def test_max_num_seqs_alone_trims_the_default_graph_sizes() -> None:
    placement = parse_placement({"vlm": {"max_num_seqs": 12}, "asr": {"max_num_seqs": 4}})
    assert placement.vlm.cuda_graph_capture_sizes == (1, 2, 4, 8, 12)
    assert placement.asr.cuda_graph_capture_sizes == (1, 2, 4)
    placement = parse_placement({"tts": {"max_num_seqs": 2}})
    assert placement.tts.cuda_graph_capture_sizes == (1,)  # the TTS's graphs are batch 1
    explicit = parse_placement({"vlm": {"max_num_seqs": 8, "cuda_graph_capture_sizes": [1, 8]}})
    assert explicit.vlm.cuda_graph_capture_sizes == (1, 8)


def test_device_audit_is_off_by_default_and_set_per_placement_or_stage() -> None:
    assert not any(default_placement().stage(s).device_audit for s in ("asr", "vlm", "tts"))
    audited = parse_placement({"device_audit": True})
    assert all(audited.stage(s).device_audit for s in ("asr", "vlm", "tts"))
    one = parse_placement(
        {"runtime": "transformers", "device_audit": True, "asr": {"device_audit": False}}
    )
    assert not one.asr.device_audit and one.vlm.device_audit and one.tts.device_audit
    assert parse_placement({"tts": {"device_audit": True}}).tts.device_audit  # vllm: in-process


def test_shared_device_oversubscribed_names_all_keys() -> None:
    with pytest.raises(PlacementError) as info:
        parse_placement({"gpus": 1, "vlm": {"gpu_memory_utilization": 0.9}})
    assert "`vlm.gpu_memory_utilization`" in str(info.value)
    assert "`asr.gpu_memory_utilization`" in str(info.value)


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(PlacementError, match="cannot read"):
        load_placement(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[vlm\n", encoding="utf-8")
    with pytest.raises(PlacementError, match="not valid TOML"):
        load_placement(bad)


def test_transformers_runtime_allows_cpu_stages(tmp_path: Path) -> None:
    path = tmp_path / "cpu.toml"
    path.write_text(
        'runtime = "transformers"\ngpus = 1\n[asr]\ndevice = "cpu"\n[vlm]\ndevice = "cpu"\n'
        '[tts]\ndevice = "cpu"\ngpu_memory_utilization = 0.95\n',
        encoding="utf-8",
    )
    placement = load_placement(path)
    assert placement.runtime == "transformers"
    assert placement.vlm.torch_device == "cpu" and not placement.vlm.cuda_graphs
    assert placement.devices() == {}  # no CUDA device, nothing to add up
    assert default_placement(1).runtime == "vllm"
    assert default_placement(2).asr.torch_device == "cuda:1"


@pytest.mark.parametrize(
    ("doc", "key"),
    [
        ({"runtime": "tensorrt"}, "runtime"),
        ({"runtime": "transformers", "asr": {"device": "gpu"}}, "asr.device"),
        ({"tts": {"max_num_batched_tokens": 512}}, "tts.max_num_batched_tokens"),
        ({"vlm": {"max_num_batched_tokens": 0}}, "vlm.max_num_batched_tokens"),
        ({"vlm": {"kv_slots": 2}}, "vlm.kv_slots"),  # vLLM: its own prefix cache
        ({"runtime": "transformers", "vlm": {"kv_slots": -1}}, "vlm.kv_slots"),
        ({"runtime": "transformers", "vlm": {"kv_slots": True}}, "vlm.kv_slots"),
        ({"runtime": "transformers", "vlm": {"kv_slot_mib": 0}}, "vlm.kv_slot_mib"),
        ({"runtime": "transformers", "vlm": {"kv_slot_mib": "1G"}}, "vlm.kv_slot_mib"),
        ({"runtime": "transformers", "vlm": {"encoded_frames": -2}}, "vlm.encoded_frames"),
        ({"runtime": "transformers", "asr": {"kv_slots": 2}}, "asr.kv_slots"),
        ({"vlm": {"batch_slots": 8}}, "vlm.batch_slots"),  # vLLM batches on its own
        ({"runtime": "transformers", "vlm": {"batch_slots": 33}}, "vlm.batch_slots"),
        ({"runtime": "transformers", "vlm": {"batch_slots": -1}}, "vlm.batch_slots"),
        ({"runtime": "transformers", "asr": {"batch_slots": 4}}, "asr.batch_slots"),
        ({"tts": {"batch_streams": 33}}, "tts.batch_streams"),
        ({"tts": {"batch_streams": -1}}, "tts.batch_streams"),
        ({"vlm": {"batch_streams": 8}}, "vlm.batch_streams"),  # a TTS key
        (
            {"runtime": "transformers", "vlm": {"prefill_chunk_tokens": 0}},
            "vlm.prefill_chunk_tokens",
        ),
    ],
)
def test_runtime_and_cpu_device_errors_name_the_key(doc: dict[str, object], key: str) -> None:
    with pytest.raises(PlacementError, match=f"`{key}"):
        parse_placement(doc)


def test_vllm_runtime_on_cpu_runs_eager_with_no_device_to_pin() -> None:
    from backends.gpu.engines import engine_kwargs

    placement = parse_placement(
        {"vlm": {"device": "cpu", "max_num_batched_tokens": 1024}, "asr": {"device": "cpu"}}
    )
    assert placement.runtime == "vllm" and not placement.vlm.cuda_graphs
    kwargs = engine_kwargs(placement.vlm)
    assert kwargs["enforce_eager"] is True
    assert "cudagraph_capture_sizes" not in kwargs and "device_ids" not in kwargs
    assert kwargs["max_num_batched_tokens"] == 1024
    assert engine_kwargs(placement.asr)["max_num_batched_tokens"] == 4096  # the sized default


def test_vllm_runtime_on_cpu_backend_describes_its_stages(tmp_path: Path) -> None:
    from backends.gpu.backend import create_backend
    from backends.gpu.engines import VllmEngine
    from backends.gpu.tts import EagerSynthesizer

    path = tmp_path / "cpu.toml"
    path.write_text('[asr]\ndevice = "cpu"\n[vlm]\ndevice = "cpu"\n[tts]\ndevice = "cpu"\n')
    backend = create_backend(placement=str(path), profile="speech")
    assert isinstance(backend.vlm.engine, VllmEngine)  # type: ignore[attr-defined]
    assert isinstance(backend.tts.synthesizer, EagerSynthesizer)  # type: ignore[attr-defined]
    assert "asr on cpu (vllm, eager), vlm on cpu (vllm, eager)" in backend.description
    assert "tts on cpu (qwen_tts eager)" in backend.description


def test_transformers_runtime_backend_builds_without_torch(tmp_path: Path) -> None:
    from backends.gpu.backend import create_backend
    from backends.gpu.hf_engines import HfAsrEngine, HfVlmEngine
    from backends.gpu.tts import EagerSynthesizer

    path = tmp_path / "cpu.toml"
    path.write_text(
        'runtime = "transformers"\n[asr]\ndevice = "cpu"\ndtype = "auto"\n[vlm]\ndevice = "cpu"\n'
        '[tts]\ndevice = "cpu"\nmax_tokens = 6\n',
        encoding="utf-8",
    )
    backend = create_backend(placement=str(path), profile="speech")
    assert isinstance(backend.asr.engine, HfAsrEngine)  # type: ignore[union-attr]
    assert backend.asr.engine.dtype == "float32"  # type: ignore[union-attr]
    assert isinstance(backend.vlm.engine, HfVlmEngine)  # type: ignore[attr-defined]
    assert backend.vlm.prepares_frames  # frames are encoded as they arrive (16 kept)
    synthesizer = backend.tts.synthesizer  # type: ignore[attr-defined]
    assert isinstance(synthesizer, EagerSynthesizer)
    assert synthesizer.device == "cpu" and synthesizer.max_new_tokens == 6
    assert "tts on cpu (qwen_tts eager)" in backend.description


def test_tts_batch_streams_picks_the_batched_synthesizer(tmp_path: Path) -> None:
    from backends.gpu.backend import create_backend
    from backends.gpu.batched_tts import BatchedSynthesizer

    path = tmp_path / "cpu.toml"
    path.write_text(
        '[asr]\ndevice = "cpu"\n[vlm]\ndevice = "cpu"\n'
        '[tts]\ndevice = "cpu"\nbatch_streams = 8\nmax_tokens = 6\n',
        encoding="utf-8",
    )
    backend = create_backend(placement=str(path), profile="speech")
    synthesizer = backend.tts.synthesizer  # type: ignore[attr-defined]
    assert isinstance(synthesizer, BatchedSynthesizer)
    assert (synthesizer.slots, synthesizer.max_frames, synthesizer.graphs) == (8, 6, False)
    assert "tts on cpu (batched, 8 streams)" in backend.description
    assert parse_placement({}).tts.batch_streams == 0  # one utterance at a time by default


def test_transformers_runtime_vlm_keeps_what_the_placement_says(tmp_path: Path) -> None:
    from backends.gpu.backend import create_backend

    path = tmp_path / "cpu.toml"
    path.write_text(
        'runtime = "transformers"\n[vlm]\ndevice = "cpu"\nkv_slots = 2\nkv_slot_mib = 1.5\n'
        "encoded_frames = 0\n",
        encoding="utf-8",
    )
    backend = create_backend(placement=str(path), profile="camera")
    engine = backend.vlm.engine  # type: ignore[attr-defined]
    assert engine.slots.slots == 2 and engine.slots.max_bytes == 3 * 2**19
    assert not backend.vlm.prepares_frames  # no frame kept: none prepared
    defaults = parse_placement({"runtime": "transformers"}).vlm
    assert (defaults.kv_slots, defaults.kv_slot_mib, defaults.encoded_frames) == (4, None, 16)


def test_transformers_runtime_vlm_batches_when_the_placement_gives_it_slots(
    tmp_path: Path,
) -> None:
    from backends.gpu.backend import create_backend
    from backends.gpu.batched_engine import BatchedHfEngine
    from backends.joyai.memory import session_of

    path = tmp_path / "batched.toml"
    path.write_text(
        'runtime = "transformers"\n[vlm]\ndevice = "cpu"\nbatch_slots = 8\n'
        "prefill_chunk_tokens = 64\n",
        encoding="utf-8",
    )
    backend = create_backend(placement=str(path), profile="camera")
    engine = backend.vlm.engine  # type: ignore[attr-defined]
    assert isinstance(engine, BatchedHfEngine)
    assert (engine.batch_slots, engine.prefill_chunk_tokens) == (8, 64)
    # a session's slot keeps its KV for that session's next turn: the runtime's ids
    assert engine.session_of is session_of
    assert session_of("sess_ab12/resp_3:vlm:1") == "sess_ab12"
    assert session_of("warmup") is None
    defaults = parse_placement({"runtime": "transformers"}).vlm
    assert (defaults.batch_slots, defaults.prefill_chunk_tokens) == (0, 256)


def test_b18_an_evicted_gpu_engine_takes_the_backend_out_of_service(tmp_path: Path) -> None:
    from backends.base import EngineDead
    from backends.gpu.backend import create_backend

    path = tmp_path / "cpu.toml"
    path.write_text('runtime = "transformers"\n[asr]\ndevice = "cpu"\n[vlm]\ndevice = "cpu"\n')
    backend = create_backend(placement=str(path), profile="speech")
    assert backend.dead == {}
    backend.asr.health.evict(EngineDead("engine core exited", stage="asr"))  # type: ignore[union-attr]
    backend.asr.health.evict(EngineDead("again", stage="asr"))  # type: ignore[union-attr]
    assert list(backend.dead) == ["asr"] and "engine core exited" in backend.dead["asr"]


def test_the_gpu_backend_brings_server_vad_or_says_it_has_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `server_vad` session on the GPU backend once never heard speech: the backend
    had no VAD, and the runtime drops every scoring request then."""
    import importlib.util

    from backends.cpu.vad import SileroVad
    from backends.gpu.backend import create_backend

    pytest.importorskip("onnxruntime")
    path = tmp_path / "cpu.toml"
    path.write_text('runtime = "transformers"\n[asr]\ndevice = "cpu"\n[vlm]\ndevice = "cpu"\n')
    backend = create_backend(placement=str(path), profile="speech")
    assert isinstance(backend.vad, SileroVad)
    assert "server VAD: Silero on cpu" in backend.description
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "onnxruntime" else real(name, *a),
    )
    without = create_backend(placement=str(path), profile="speech")
    assert without.vad is None
    assert "no server VAD (onnxruntime is not installed)" in without.description
