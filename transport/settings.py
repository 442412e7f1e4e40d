"""Server settings: defaults, the TOML config file, and command-line overrides.

[server]   host, port, backend (cpu|scripted|gpu|remote), profile (speech|camera), api_key,
           allowed_origins (empty: no Origin, the server's own and loopback origins; "*":
           any; see transport/access_policy.py), protect_probes (/readyz and /metrics need
           the key), workers (worker processes; default: one per core, one for gpu),
           duplex, host_id (names this server in its session ids, for a balancer)
[backend]  options for the backend factory (asr, asr_model, tts, tts_voice, vad_model,
           turn_model, placement)
[remote]   the remote backend's servers, per stage (backends/remote/config.py, docs/deploy.md);
           checked here, before the server starts, when the backend is `remote`
[delegation] the background model that answers delegated questions (B31): an
           OpenAI-compatible chat server (backends/remote/config.py); any backend; absent:
           delegated questions are dropped and only the note is spoken
[limits]   any field of spec.limits.Limits
[session]  the default session object, checked by the public session validator
[webrtc]   WebRTC calls (transport/calls.py): ice_servers (STUN/TURN, each {urls,
           username, credential}), host_addresses (host candidates added to the
           interfaces' own; default loopback), setup_timeout_s (ICE and the events data
           channel must be up within it)
"""

from __future__ import annotations

import importlib
import os
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from runtime.workers import HOST_ID
from spec.errors import InvalidSessionConfig
from spec.limits import Limits
from spec.session_config import SessionConfig, validate_session
from transport.access_policy import check_origin_setting

__all__ = [
    "BACKEND_NAMES",
    "IceServer",
    "ServerSettings",
    "WebRtcSettings",
    "default_workers",
    "load_settings",
]

BACKEND_NAMES = ("cpu", "scripted", "gpu", "remote")
_SERVER_KEYS = {
    "host",
    "port",
    "backend",
    "profile",
    "api_key",
    "allowed_origins",
    "protect_probes",
    "workers",
    "duplex",
    "host_id",
}


def default_workers(backend: str) -> int:
    """One worker process per core (`os.cpu_count()`); one for the gpu backend, whose
    models fill the GPUs once."""
    return 1 if backend == "gpu" else os.cpu_count() or 1


@dataclass(frozen=True)
class IceServer:
    """A STUN or TURN server offered to a call's ICE agent (none is contacted unless set)."""

    urls: tuple[str, ...]
    username: str | None = None
    credential: str | None = None


@dataclass(frozen=True)
class WebRtcSettings:
    ice_servers: tuple[IceServer, ...] = ()
    #: added to the host candidates ICE gathers from the interfaces (which leave out
    #: loopback): a client on the same machine connects even with no other interface
    host_addresses: tuple[str, ...] = ("127.0.0.1",)
    #: a call whose ICE and `oai-events` data channel are not up within this ends
    setup_timeout_s: float = 20.0

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> WebRtcSettings:
        """Raises: ValueError naming the key."""
        bad = set(data) - {"ice_servers", "host_addresses", "setup_timeout_s"}
        if bad:
            raise ValueError(f"unknown key `webrtc.{sorted(bad)[0]}`")
        servers = []
        for n, entry in enumerate(data.get("ice_servers", [])):
            if not isinstance(entry, dict) or not set(entry) <= {"urls", "username", "credential"}:
                raise ValueError(
                    f"webrtc.ice_servers[{n}] must be a table of urls, username, credential"
                )
            urls = entry.get("urls")
            urls = [urls] if isinstance(urls, str) else urls
            if not urls or not all(
                isinstance(u, str) and u.split(":")[0] in ("stun", "stuns", "turn", "turns")
                for u in urls
            ):
                raise ValueError(f"webrtc.ice_servers[{n}].urls must be stun: or turn: URLs")
            servers.append(IceServer(tuple(urls), entry.get("username"), entry.get("credential")))
        addresses = data.get("host_addresses", list(cls.host_addresses))
        if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
            raise ValueError("webrtc.host_addresses must be a list of IP addresses")
        timeout = data.get("setup_timeout_s", cls.setup_timeout_s)
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError("webrtc.setup_timeout_s must be a positive number of seconds")
        return cls(tuple(servers), tuple(addresses), float(timeout))


@dataclass(frozen=True)
class ServerSettings:
    host: str = "127.0.0.1"
    port: int = 8000
    backend: str = "cpu"
    profile: str = "speech"
    api_key: str | None = None
    allowed_origins: tuple[str, ...] = ()  # empty: the default policy (access_policy.py)
    protect_probes: bool = False  # /readyz and /metrics answer 401 without the key
    workers: int | None = None  # worker processes; None: `default_workers(backend)`
    #: a duplex deployment: every connection speaks the duplex dialect (resumable
    #: sessions, `autostart` as upstream), as `?duplex=1` asks for one connection
    duplex: bool = False
    #: names this server in every session id it issues (`sess_<host_id>.<...>`), so that a
    #: balancer routes a resume to it by the id (docs/deploy.md); None: ids name no host
    host_id: str | None = None
    backend_options: dict[str, Any] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    session_defaults: SessionConfig = field(default_factory=SessionConfig)
    webrtc: WebRtcSettings = field(default_factory=WebRtcSettings)


def load_settings(path: str | Path | None = None, **overrides: Any) -> ServerSettings:
    """Defaults, then the config file, then the non-None overrides.

    Raises:
        ValueError: an unknown key or a bad value, naming it.
    """
    settings = ServerSettings()
    if path is not None:
        data = tomllib.loads(Path(path).read_text())
        unknown = set(data) - {
            "server",
            "backend",
            "limits",
            "session",
            "remote",
            "delegation",
            "webrtc",
        }
        if unknown:
            raise ValueError(f"unknown config table [{sorted(unknown)[0]}]")
        server = dict(data.get("server", {}))
        bad = set(server) - _SERVER_KEYS
        if bad:
            raise ValueError(f"unknown key `server.{sorted(bad)[0]}`")
        if "allowed_origins" in server:
            origins = server["allowed_origins"]
            if not isinstance(origins, list) or not all(isinstance(o, str) for o in origins):
                raise ValueError("server.allowed_origins must be a list of strings")
            server["allowed_origins"] = tuple(origins)
        if "duplex" in server and not isinstance(server["duplex"], bool):
            raise ValueError("server.duplex must be true or false")
        try:
            session = validate_session(data.get("session", {}))
        except InvalidSessionConfig as exc:
            raise ValueError(f"invalid [session] ({exc.param}): {exc.message}") from None
        backend_options = dict(data.get("backend", {}))
        if "remote" in data:
            backend_options["remote"] = data["remote"]
        if "delegation" in data:
            backend_options["delegation"] = data["delegation"]
        settings = replace(
            settings,
            **server,
            backend_options=backend_options,
            limits=Limits.from_mapping(data.get("limits", {})),
            session_defaults=session,
            webrtc=WebRtcSettings.from_mapping(dict(data.get("webrtc", {}))),
        )
    given = {k: v for k, v in overrides.items() if v is not None}
    if "backend_options" in given:
        given["backend_options"] = {**settings.backend_options, **given["backend_options"]}
    settings = replace(settings, **given)
    if settings.backend not in BACKEND_NAMES:
        raise ValueError(f"unknown backend `{settings.backend}`")
    if settings.profile not in ("speech", "camera"):
        raise ValueError(f"unknown profile `{settings.profile}`")
    if settings.backend == "remote":
        from backends.remote.config import parse_remote_config

        # a RemoteConfigError is a ValueError naming the key: refused before binding
        parse_remote_config(settings.backend_options.get("remote"), profile=settings.profile)
    if settings.backend == "cpu" and "tts" in settings.backend_options:
        # by name, as the registry reaches a backend: the cpu one is an optional extra
        engines: tuple[str, ...] = importlib.import_module("backends.cpu.backend").TTS_ENGINES
        tts = settings.backend_options["tts"]
        if tts not in engines:
            raise ValueError(
                f"backend.tts must be one of {', '.join(engines)}, not {tts!r} "
                "(piper needs the `piper` extra)"
            )
    for origin in settings.allowed_origins:
        check_origin_setting(origin)
    if type(settings.protect_probes) is not bool:
        raise ValueError(f"protect_probes must be true or false, not {settings.protect_probes!r}")
    if settings.protect_probes and not settings.api_key:
        raise ValueError("protect_probes needs an api_key (the probes then ask for it)")
    if settings.backend_options.get("delegation") is not None:
        from backends.remote.config import parse_delegation_config

        parse_delegation_config(settings.backend_options["delegation"])
    host_id = settings.host_id
    if host_id is not None and (type(host_id) is not str or not HOST_ID.fullmatch(host_id)):
        raise ValueError(
            "server.host_id must be 1 to 32 characters of a-z, 0-9 and `-`, the first a "
            f"letter or digit, not {host_id!r}"
        )
    workers = settings.workers
    if workers is not None and (type(workers) is not int or workers < 1):
        raise ValueError(f"workers must be a whole number of at least 1, not {workers!r}")
    return settings
