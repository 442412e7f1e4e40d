"""The GPU check's `tts_batched` part: how many TTS streams the batched streaming TTS
(`backends/gpu/batched_tts.py`) holds in real time, at batch 1, 8 and 32.

B streams are started together on one `BatchedSynthesizer` (CUDA Graphs per rows bucket
on a GPU, eager in the CPU rehearsal), each `frames` codec frames of the same text; the
random Talker's end id is suppressed so that every stream makes all of them (fixed work,
as the check's other engines never sample their special ids). A step makes one 80 ms
frame for every stream, so the streams hold real time while the median step is shorter
than a frame: the real-time factor per stream is step / 80 ms. Also: first chunk p50 /
p95 of the B streams (submitted together: the later ones wait for the earlier ones'
prefill chunks), and the wall time of the batch against its audio.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any, Final

__all__ = ["TTS_BATCHES", "streams_in_real_time"]

TTS_BATCHES: Final = (1, 8, 32)
FRAME_S: Final = 0.08  # a 12.5 Hz codec frame
TEXT: Final = "Hello! I can see a red ball on the table in front of you."


def _ms(seconds: list[float], q: float) -> float:
    ordered = sorted(seconds)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000, 1)


def _run_batch(synth: Any, batch: int, heard: list[tuple[str, float]]) -> dict[str, Any]:
    heard.clear()
    samples = [0] * batch
    errors: list[str] = []

    def one(index: int) -> None:
        try:
            for chunk in synth.stream(
                TEXT, speaker="Vivian", language="Auto", stop=threading.Event()
            ):
                samples[index] += int(chunk.size)
        except Exception as exc:  # reported with the figures
            errors.append(f"{type(exc).__name__}: {exc}"[:300])

    began = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(batch)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - began
    steps = [s for name, s in heard if name == "tts_decode_step"]
    firsts = [s for name, s in heard if name == "tts_first_chunk"]
    step = statistics.median(steps) if steps else float("nan")
    audio_s = statistics.median(samples) / synth.sample_rate_hz
    return {
        "step_ms": round(step * 1000, 2),
        "rtf_per_stream": round(step / FRAME_S, 3),
        "holds_real_time": step < FRAME_S,
        "first_chunk_ms": {"p50": _ms(firsts, 0.5), "p95": _ms(firsts, 0.95)} if firsts else None,
        "audio_s_per_stream": round(audio_s, 2),
        "wall_s": round(wall, 2),
        "errors": errors[:3],
    }


def streams_in_real_time(
    model: str, *, device: str, dtype: str, frames: int, modes: tuple[bool, ...]
) -> dict[str, Any]:
    """The figures above for each of `modes` (CUDA Graphs on / off), by batch."""
    import torch

    from backends.gpu.batched_tts import BatchedSynthesizer

    result: dict[str, Any] = {}
    for graphs in modes:
        label = "graphs_on" if graphs else "graphs_off"
        heard: list[tuple[str, float]] = []
        synth = BatchedSynthesizer(
            model,
            device=device,
            dtype=dtype,
            slots=max(TTS_BATCHES),
            max_len=512,
            max_new_tokens=frames,
            graphs=graphs,
            on_timing=lambda name, seconds, heard=heard: heard.append((name, seconds)),
        )
        figures: dict[str, Any] = {}
        result[label] = figures
        try:
            loading = time.perf_counter()
            synth.load()
            batch = synth.batch
            assert batch is not None
            decoder = batch.decoder
            with torch.inference_mode():  # fixed work: no stream ends before its frames
                end = torch.tensor([batch.eos_id], device=decoder.device)
                never = decoder._suppress
                decoder._suppress = end if never is None else torch.cat([never, end])
            synth.warmup()
            figures["load_and_warmup_s"] = round(time.perf_counter() - loading, 1)
            for size in TTS_BATCHES:
                figures[f"batch_{size}"] = _run_batch(synth, size, heard)
            held = [b for b in TTS_BATCHES if figures[f"batch_{b}"]["holds_real_time"]]
            figures["largest_batch_in_real_time"] = max(held) if held else 0
            figures["graph_buckets_captured"] = decoder.captured_buckets
            figures["speaker_prefixes_computed"] = batch.prefixes_computed
        except Exception as exc:  # this mode's error; the other mode still runs
            figures["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        finally:
            synth.close()
    return result
