"""The `[remote]` table of the server TOML, parsed and checked before anything starts.

    [remote]
    probe_interval_s = 2.0       # how often an ejected replica's /health is probed
    connect_timeout_s = 2.0      # TCP connect (and TLS) per attempt, every stage

    [remote.asr]                 # speech profile only; /v1/audio/transcriptions
    urls = ["http://asr-0:8000", "http://asr-1:8000"]
    model = "Qwen/Qwen3-ASR-1.7B"
    api_key = "..."              # sent as Authorization: Bearer; or api_key_env = "NAME"
    timeout_s = 10.0             # longest wait for the next bytes of a response
    language = "en"              # optional: forced transcription language
    max_tokens = 256             # transcript cap (max_completion_tokens)

    [remote.vlm]                 # /v1/chat/completions, stream = true
    urls = ["http://vlm-0:8000"]
    model = "jdopensource/JoyAI-VL-Interaction-Preview"
    max_model_len = 8192         # the server's --max-model-len (the prompt budget)
    max_tokens = 256             # reply cap
    max_images = 8
    image_tokens = 256           # a frame's cost: start the server with a max_pixels bound
    summary_memory = false       # summarise the turns the budget drops, in the background
    summary_max_chars = 1200     #   the summary's bound (cut at a sentence)
    summary_timeout_s = 20.0     #   one summary job's time bound
    summary_every_turns = 8      #   dropped turns per summary job
    session_affinity = true      # keep a session's turns on one replica (its prefix cache)
    affinity_slack = 1           #   while it has at most this many more requests in flight
    extra_body = { min_p = 0.05 } # optional: more fields of the chat request (vLLM's own
                                 # sampling extras); never one the stage sets itself

    [remote.tts]                 # vLLM-Omni /v1/audio/speech, stream = true, raw PCM16
    urls = ["http://tts-0:8091"]
    model = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"
    voice = "vivian"
    sample_rate_hz = 24000       # the rate the server streams at (Qwen3-TTS: 24 kHz)

The `[delegation]` table (optional, any backend) names the background model that answers
the questions the VLM delegates (B31), an OpenAI-compatible `/v1/chat/completions`
server such as any `vllm serve`:

    [delegation]
    urls = ["http://llm-0:8000"]  # or url = "http://llm-0:8000"
    model = "Qwen/Qwen3-8B"
    api_key_env = "DELEGATION_KEY" # or api_key = "..."; optional
    timeout_s = 30.0             # longest wait for the answer's bytes
    max_tokens = 256             # answer cap
    instructions = "..."         # optional: the background model's system prompt

A URL is a server root (`http://host:port`, optionally with a path prefix); the API
paths (`/v1/...`) and the health path (`/health`) are appended to it. Every error names
the offending key (`remote.vlm.urls[1]`), so a bad file is refused before the server
binds its port. Nothing here imports httpx: the settings loader checks the table even
where the remote backend's extra is not installed.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

from backends.joyai.sampling import JOYAI_SAMPLING_PARAMS

__all__ = [
    "RemoteConfig",
    "RemoteConfigError",
    "StageConfig",
    "parse_delegation_config",
    "parse_remote_config",
]

STAGES: Final = ("asr", "vlm", "tts")
_TOP_KEYS: Final = {"probe_interval_s", "connect_timeout_s", *STAGES}
_COMMON_KEYS: Final = {"urls", "model", "api_key", "api_key_env", "timeout_s", "health_path"}
_STAGE_KEYS: Final = {
    "asr": _COMMON_KEYS | {"language", "max_tokens"},
    "vlm": _COMMON_KEYS
    | {
        "max_model_len",
        "max_tokens",
        "max_images",
        "context_budget_tokens",
        "image_tokens",
        "extra_body",
    }
    | {"summary_memory", "summary_max_chars", "summary_timeout_s", "summary_every_turns"}
    | {"session_affinity", "affinity_slack"},
    "tts": _COMMON_KEYS | {"voice", "sample_rate_hz", "language"},
    "delegation": _COMMON_KEYS | {"max_tokens", "instructions"},
}
#: fields of the chat request the VLM stage sets itself: `extra_body` may only add others,
#: so it can never lift the reply cap nor change the prompt or JoyAI's sampling
_VLM_BODY_KEYS: Final = frozenset(
    {"model", "messages", "stream", "skip_special_tokens", "max_completion_tokens"}
    | set(JOYAI_SAMPLING_PARAMS)
)
_DEFAULT_TIMEOUT_S: Final = {"asr": 15.0, "vlm": 30.0, "tts": 30.0, "delegation": 30.0}


class RemoteConfigError(ValueError):
    """A `[remote]` key is missing, unknown or has a bad value; the message names it."""


@dataclass(frozen=True, slots=True)
class StageConfig:
    """One stage's fleet: where it is served and how to talk to it."""

    stage: str
    urls: tuple[str, ...]
    model: str
    api_key: str | None = None
    timeout_s: float = 30.0
    health_path: str = "/health"
    language: str | None = None  # asr: forced language; tts: the speech API's `language`
    # vlm
    max_model_len: int = 8192
    max_tokens: int = 256
    max_images: int = 8
    context_budget_tokens: int | None = None
    image_tokens: int = 256  # what one frame costs in the server's prompt (max_pixels bound)
    # vlm: a background summary of the turns the budget drops (backends/joyai/memory.py)
    summary_memory: bool = False
    summary_max_chars: int = 1200
    summary_timeout_s: float = 20.0
    summary_every_turns: int = 8
    # vlm: a session's requests stay on the replica that served its last one (its prefix
    # cache) while that one has at most `affinity_slack` more outstanding than the least
    session_affinity: bool = True
    affinity_slack: int = 1
    #: vlm: more fields of every chat-completions request (vLLM extras such as
    #: `ignore_eos`, `min_tokens`, `min_p`); never one the stage sets itself
    extra_body: Mapping[str, Any] = field(default_factory=dict, hash=False)
    # tts
    voice: str | None = None
    sample_rate_hz: int = 24_000
    # delegation: the background model's system prompt (None: the default)
    instructions: str | None = None

    @property
    def budget_tokens(self) -> int:
        """Tokens the VLM prompt may use: the configured budget, or the model length minus
        the reply cap."""
        if self.context_budget_tokens is not None:
            return self.context_budget_tokens
        return self.max_model_len - self.max_tokens


@dataclass(frozen=True, slots=True)
class RemoteConfig:
    """The whole `[remote]` table."""

    vlm: StageConfig
    tts: StageConfig
    asr: StageConfig | None = None  # None: camera profile
    probe_interval_s: float = 2.0
    connect_timeout_s: float = 2.0

    def stages(self) -> list[StageConfig]:
        return [s for s in (self.asr, self.vlm, self.tts) if s is not None]


def _number(value: Any, key: str, *, positive: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RemoteConfigError(f"`{key}` must be a number, not {value!r}")
    if positive and value <= 0:
        raise RemoteConfigError(f"`{key}` must be greater than 0, not {value!r}")
    return float(value)


def _whole(value: Any, key: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise RemoteConfigError(
            f"`{key}` must be a whole number of at least {minimum}, not {value!r}"
        )
    return value


def _text(value: Any, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise RemoteConfigError(f"`{key}` must be a non-empty string, not {value!r}")
    return value.strip()


def _url(value: Any, key: str) -> str:
    text = _text(value, key)
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteConfigError(
            f"`{key}` must be an http(s) server root such as http://10.0.0.5:8000, not {value!r}"
        )
    if parts.query or parts.fragment:
        raise RemoteConfigError(f"`{key}` must not carry a query or fragment: {value!r}")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise RemoteConfigError(f"`{key}` has a bad port: {value!r}") from None
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        raise RemoteConfigError(
            f"`{key}` must be the server root, without /v1 (it is appended): {value!r}"
        )
    return f"{parts.scheme}://{parts.netloc}{path}"


def _extra_body(raw: Any, key: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise RemoteConfigError(f"`{key}` must be a table")
    taken = sorted(set(raw) & _VLM_BODY_KEYS)
    if taken:
        raise RemoteConfigError(
            f"`{key}.{taken[0]}` is set by the stage itself (the reply cap is `max_tokens`)"
        )
    try:
        json.dumps(dict(raw))
    except (TypeError, ValueError):
        raise RemoteConfigError(f"`{key}` must hold JSON values (no dates or times)") from None
    return dict(raw)


def _stage(name: str, raw: Any, prefix: str, *, key: str | None = None) -> StageConfig:
    key = key or f"{prefix}.{name}"
    if not isinstance(raw, Mapping):
        raise RemoteConfigError(f"`{key}` must be a table")
    unknown = sorted(set(raw) - _STAGE_KEYS[name])
    if unknown:
        raise RemoteConfigError(f"unknown key `{key}.{unknown[0]}`")
    for required in ("urls", "model"):
        if required not in raw:
            raise RemoteConfigError(f"`{key}.{required}` is required")
    urls_raw = raw["urls"]
    if isinstance(urls_raw, str):
        urls_raw = [urls_raw]
    if not isinstance(urls_raw, list) or not urls_raw:
        raise RemoteConfigError(f"`{key}.urls` must be a non-empty list of server URLs")
    urls = tuple(_url(u, f"{key}.urls[{i}]") for i, u in enumerate(urls_raw))
    if len(set(urls)) != len(urls):
        raise RemoteConfigError(f"`{key}.urls` lists a server twice")
    if "api_key" in raw and "api_key_env" in raw:
        raise RemoteConfigError(f"`{key}`: set api_key or api_key_env, not both")
    api_key: str | None = None
    if "api_key" in raw:
        api_key = _text(raw["api_key"], f"{key}.api_key")
    elif "api_key_env" in raw:
        env = _text(raw["api_key_env"], f"{key}.api_key_env")
        api_key = os.environ.get(env)
        if not api_key:
            raise RemoteConfigError(f"`{key}.api_key_env`: environment variable {env} is not set")
    options: dict[str, Any] = {}
    timeout = raw.get("timeout_s", _DEFAULT_TIMEOUT_S[name])
    options["timeout_s"] = _number(timeout, f"{key}.timeout_s")
    if "health_path" in raw:
        path = _text(raw["health_path"], f"{key}.health_path")
        if not path.startswith("/"):
            raise RemoteConfigError(f"`{key}.health_path` must start with /, not {path!r}")
        options["health_path"] = path
    if "language" in raw:
        options["language"] = _text(raw["language"], f"{key}.language")
    if "voice" in raw:
        options["voice"] = _text(raw["voice"], f"{key}.voice")
    if "instructions" in raw:
        options["instructions"] = _text(raw["instructions"], f"{key}.instructions")
    if "sample_rate_hz" in raw:
        options["sample_rate_hz"] = _whole(
            raw["sample_rate_hz"], f"{key}.sample_rate_hz", minimum=8000
        )
    if "extra_body" in raw:
        options["extra_body"] = _extra_body(raw["extra_body"], f"{key}.extra_body")
    for flag in ("summary_memory", "session_affinity"):
        if flag in raw:
            if not isinstance(raw[flag], bool):
                raise RemoteConfigError(f"`{key}.{flag}` must be true or false, not {raw[flag]!r}")
            options[flag] = raw[flag]
    if "affinity_slack" in raw:
        options["affinity_slack"] = _whole(
            raw["affinity_slack"], f"{key}.affinity_slack", minimum=0
        )
    if "summary_timeout_s" in raw:
        options["summary_timeout_s"] = _number(raw["summary_timeout_s"], f"{key}.summary_timeout_s")
    fields = (
        "max_model_len",
        "max_tokens",
        "max_images",
        "context_budget_tokens",
        "image_tokens",
        "summary_max_chars",
        "summary_every_turns",
    )
    for field_name in fields:
        if field_name in raw:
            options[field_name] = _whole(raw[field_name], f"{key}.{field_name}")
    config = StageConfig(
        stage=name, urls=urls, model=_text(raw["model"], f"{key}.model"), api_key=api_key, **options
    )
    if name == "vlm" and config.budget_tokens < 1:
        raise RemoteConfigError(
            f"`{key}.max_tokens` ({config.max_tokens}) leaves no room for the prompt in"
            f" `{key}.max_model_len` ({config.max_model_len})"
        )
    return config


def parse_remote_config(
    raw: Mapping[str, Any] | None, *, profile: str = "speech", prefix: str = "remote"
) -> RemoteConfig:
    """Check the `[remote]` table for `profile` and return it typed.

    Raises:
        RemoteConfigError: naming the first missing, unknown or bad key.
    """
    if raw is None:
        raise RemoteConfigError(
            f"the remote backend needs a [{prefix}] table in the config file (see docs/deploy.md)"
        )
    if not isinstance(raw, Mapping):
        raise RemoteConfigError(f"`{prefix}` must be a table")
    unknown = sorted(set(raw) - _TOP_KEYS)
    if unknown:
        raise RemoteConfigError(f"unknown key `{prefix}.{unknown[0]}`")
    needed = ["vlm", "tts"] + (["asr"] if profile == "speech" else [])
    for name in needed:
        if name not in raw:
            why = " (the speech profile transcribes)" if name == "asr" else ""
            raise RemoteConfigError(f"[{prefix}.{name}] is required{why}")
    asr = _stage("asr", raw["asr"], prefix) if profile == "speech" else None
    return RemoteConfig(
        asr=asr,
        vlm=_stage("vlm", raw["vlm"], prefix),
        tts=_stage("tts", raw["tts"], prefix),
        probe_interval_s=_number(raw.get("probe_interval_s", 2.0), f"{prefix}.probe_interval_s"),
        connect_timeout_s=_number(raw.get("connect_timeout_s", 2.0), f"{prefix}.connect_timeout_s"),
    )


def parse_delegation_config(raw: Any, *, prefix: str = "delegation") -> StageConfig:
    """Check the `[delegation]` table (the background model, B31) and return it typed;
    `url` is accepted for a single server.

    Raises:
        RemoteConfigError: naming the first missing, unknown or bad key.
    """
    if not isinstance(raw, Mapping):
        raise RemoteConfigError(f"`{prefix}` must be a table")
    if "url" in raw:
        if "urls" in raw:
            raise RemoteConfigError(f"`{prefix}`: set url or urls, not both")
        raw = {**{k: v for k, v in raw.items() if k != "url"}, "urls": [raw["url"]]}
    return _stage("delegation", raw, prefix, key=prefix)
