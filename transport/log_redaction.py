"""Keys never reach a log: a filter that masks credentials in every record it sees.

uvicorn logs each websocket request with its query string (`"WebSocket
/v1/realtime?token=..." [accepted]`) and each HTTP request in its access log; at debug
level the websockets library logs the request headers (`Authorization: Bearer ...`,
the key subprotocol). `RedactCredentials` rewrites a record's message, arguments and
traceback text before any handler formats it:

    ?token=s3cret&model=x            -> ?token=[redacted]&model=x   (CREDENTIAL_PARAMS)
    Authorization: Bearer s3cret     -> Authorization: Bearer [redacted]
    openai-insecure-api-key.s3cret   -> openai-insecure-api-key.[redacted]

It sits on the handlers (a logger's own filters miss records propagated from its
children): `configure_logging` puts it on the root handler, `uvicorn_log_config()` on
uvicorn's (`joyduplex serve` passes that config to uvicorn, in every worker process too).
"""

from __future__ import annotations

import copy
import logging
import re
from typing import Any

from transport.access_policy import CREDENTIAL_PARAMS, KEY_SUBPROTOCOL

__all__ = ["REDACTED", "RedactCredentials", "install_on_root", "redact", "uvicorn_log_config"]

REDACTED = "[redacted]"

_PARAM = re.compile(
    r"(?i)((?:^|[?&;\s\"'])(?:"
    + "|".join(sorted(CREDENTIAL_PARAMS, key=len, reverse=True))
    + r")=)[^&;#\s\"']*"
)
_SCHEME = re.compile(r"(?i)\b((?:bearer|basic)\s+)[^\s\"',]+")
_SUBPROTOCOL = re.compile(re.escape(KEY_SUBPROTOCOL) + r"[^\s\"',]+")


def redact(text: str) -> str:
    """`text` with every credential it carries replaced by `[redacted]`."""
    if "=" in text:
        text = _PARAM.sub(rf"\1{REDACTED}", text)
    text = _SCHEME.sub(rf"\1{REDACTED}", text)
    if KEY_SUBPROTOCOL in text:
        text = _SUBPROTOCOL.sub(KEY_SUBPROTOCOL + REDACTED, text)
    return text


def _redact_arg(arg: object) -> object:
    if isinstance(arg, str):
        return redact(arg)
    if arg is None or isinstance(arg, int | float | bytes):
        return arg
    text = str(arg)  # a URL object, a header list: masked as text only when it carried a key
    masked = redact(text)
    return arg if masked == text else masked


class RedactCredentials(logging.Filter):
    """Masks credentials in a record (message, arguments, traceback); drops nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redact_arg(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: _redact_arg(v) for k, v in record.args.items()}
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def install_on_root() -> None:
    """Put the filter on every handler of the root logger (once)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactCredentials) for f in handler.filters):
            handler.addFilter(RedactCredentials())


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's default logging config with `RedactCredentials` on each of its handlers
    (uvicorn.Config's `log_config`)."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact_credentials"] = {"()": f"{__name__}.RedactCredentials"}
    for handler in config["handlers"].values():
        handler["filters"] = [*handler.get("filters", []), "redact_credentials"]
    return config
