"""`create_backend`: the registry entry "scripted", its scripted stages sharing one Script
(with an end-of-turn stage whose verdicts the Script holds).

Tests reach the Script of a backend the server built with `script_of(backend)` (or any
stage's `.script`). The `camera` profile has no ASR stage (B1).

A served scripted backend takes its options from the `[backend]` table of the server's
config, e.g. a batched GPU's timing (cost_model.py) instead of fixed latencies:

    [backend]
    cost_model = "h200"
    [backend.cost_overrides.vlm]
    max_batch = 8
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from backends.base import Backend, BackendUnavailable
from backends.scripted.cost_model import engine_models
from backends.scripted.script import Script
from backends.scripted.stages import (
    ScriptedAsr,
    ScriptedTts,
    ScriptedTurnEnd,
    ScriptedVad,
    ScriptedVlm,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["DESCRIPTION", "PROFILES", "create_backend", "script_of"]

PROFILES = ("speech", "camera")
DESCRIPTION = "scripted: deterministic test backend"


def create_backend(
    *,
    script: Script | None = None,
    profile: str = "speech",
    max_records: int | None = None,
    default_transcript: str | None = None,
    latency_s: dict[str, float] | None = None,
    cost_model: str | None = None,
    cost_overrides: Mapping[str, Mapping[str, object]] | None = None,
    **_: object,
) -> Backend:
    """The scripted backend (not yet entered); other options are accepted and ignored.

    Args:
        script: the behaviour to follow and where requests are recorded (default: a new
            `Script()` with its defaults).
        profile: `speech` (ASR on) or `camera` (no ASR stage).
        max_records: for a new script, keep only about the latest this many records
            (the `[backend]` table of a served scripted backend: tools/soak.py sets it)
        default_transcript: for a new script, the ASR's answer (the VLM echoes it), so
            that a served scripted backend can speak a longer reply
        latency_s: for a new script, seconds per stage (`vad`, `asr`, `vlm`, `tts`,
            `turn_end`) instead of the defaults
        cost_model: for a new script, a named cost profile (`h200`, cost_model.py): ASR,
            VLM, TTS and the end-of-turn stage then wait on one batched engine each
            instead of their latency
        cost_overrides: with `cost_model`, per stage, fields of its cost curve to replace
            (`{"vlm": {"max_batch": 8}}`)

    Raises:
        BackendUnavailable: an unknown profile, stage, cost model or cost curve field.
    """
    if profile not in PROFILES:
        raise BackendUnavailable(
            f"scripted: unknown profile `{profile}`; expected one of {', '.join(PROFILES)}"
        )
    if script is None:
        script = Script(max_records=max_records)
        if default_transcript is not None:
            script.default_transcript = default_transcript
        for stage, seconds in (latency_s or {}).items():
            if stage not in script.latency:
                raise BackendUnavailable(
                    f"scripted: unknown stage `{stage}` in latency_s; expected one of "
                    f"{', '.join(script.latency)}"
                )
            script.latency[stage] = float(seconds)
        if cost_model is not None:
            try:
                script.engines.update(engine_models(cost_model, cost_overrides))
            except ValueError as exc:
                raise BackendUnavailable(f"scripted: {exc}") from None
        elif cost_overrides:
            raise BackendUnavailable("scripted: cost_overrides needs a cost_model")
    return Backend(
        name="scripted",
        vad=ScriptedVad(script),
        asr=ScriptedAsr(script) if profile == "speech" else None,
        vlm=ScriptedVlm(script),
        tts=ScriptedTts(script),
        description=DESCRIPTION,
        turn_end=ScriptedTurnEnd(script),
    )


def script_of(backend: Backend) -> Script:
    """The Script a scripted backend follows.

    Raises:
        TypeError: `backend` is not a scripted backend.
    """
    if not isinstance(backend.vlm, ScriptedVlm):
        raise TypeError(f"backend `{backend.name}` is not the scripted backend")
    return backend.vlm.script
