"""`create_backend()`: the remote backend, every model stage on a fleet of HTTP servers.

    speech   ASR (vLLM, /v1/audio/transcriptions) -> VLM (vLLM, /v1/chat/completions)
             -> TTS (vLLM-Omni, /v1/audio/speech)
    camera   VLM -> TTS; no ASR client is built

joyduplex stays the session tier (lifecycle, turn-taking, protocol); the models run
wherever the `[remote]` table points (`config.py`). Each stage balances over its URLs
and tracks their health (`pool.py`); a stage with no healthy replica takes the backend
out of service exactly as a dead in-process engine does (`Backend.evict`: `/readyz`
503 naming the stage, new sessions refused) and back in (`Backend.restore`) when a
replica answers its health check again. HTTP only: nothing here imports torch or vLLM.
The backend brings no VAD (`Backend.vad` is None), as the gpu backend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backends.base import Backend, BackendUnavailable
from backends.remote.config import RemoteConfig, RemoteConfigError, parse_remote_config
from backends.remote.stages import RemoteAsr, RemoteTts, RemoteVlm

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    import httpx

    from backends.remote.client import RemoteStage

__all__ = ["PROFILES", "create_backend"]

PROFILES = ("speech", "camera")


def create_backend(
    *,
    remote: Mapping[str, Any] | RemoteConfig | None = None,
    profile: str = "speech",
    transport: httpx.AsyncBaseTransport | None = None,
) -> Backend:
    """Build (not connect) the remote backend.

    Args:
        remote: the `[remote]` table of the server config (or its parsed form).
        profile: "speech" (ASR -> VLM -> TTS) or "camera" (VLM -> TTS).
        transport: an httpx transport for every stage (tests); None: real sockets.

    Raises:
        BackendUnavailable: unknown profile, or a bad `[remote]` table (naming the key).
    """
    if profile not in PROFILES:
        raise BackendUnavailable(
            f"unknown profile `{profile}`; expected one of {', '.join(PROFILES)}"
        )
    try:
        config = (
            remote
            if isinstance(remote, RemoteConfig)
            else parse_remote_config(remote, profile=profile)
        )
    except RemoteConfigError as exc:
        raise BackendUnavailable(f"remote backend: {exc}") from exc
    options: dict[str, Any] = {
        "probe_interval_s": config.probe_interval_s,
        "connect_timeout_s": config.connect_timeout_s,
        "transport": transport,
    }
    asr = RemoteAsr(config.asr, **options) if profile == "speech" and config.asr else None
    vlm = RemoteVlm(config.vlm, **options)
    tts = RemoteTts(config.tts, **options)
    stages: list[RemoteStage] = [s for s in (asr, vlm, tts) if s is not None]
    described = ", ".join(f"{s.name} x{len(s.config.urls)} ({s.config.model})" for s in stages)
    backend = Backend(
        name="remote",
        vad=None,
        asr=asr,
        vlm=vlm,
        tts=tts,
        description=f"remote backend, {profile} profile: {described}",
    )
    for stage in stages:
        stage.pool.on_change(_service_listener(backend, stage.name))
    return backend


def _service_listener(backend: Backend, stage: str) -> Callable[[bool, str], None]:
    """A pool's in/out-of-service flips -> the backend's readiness (B18)."""

    def changed(in_service: bool, reason: str) -> None:
        if in_service:
            backend.restore(stage)
        else:
            backend.evict(stage, reason)

    return changed
