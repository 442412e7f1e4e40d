"""The credential mask of every log handler (transport/log_redaction.py): it keeps the
shape of a record (uvicorn's access formatter still reads its arguments) and masks keys in
the message, the arguments and the traceback."""

from __future__ import annotations

import io
import logging
import logging.config
import sys
from collections.abc import Iterator

import pytest
import uvicorn.logging

from transport.log_redaction import RedactCredentials, redact, uvicorn_log_config

KEY = "k-3f9a"


def _format(record: logging.LogRecord, formatter: logging.Formatter) -> str:
    assert RedactCredentials().filter(record) is True  # masks, never drops
    return formatter.format(record)


def test_the_access_log_line_keeps_its_fields_with_the_key_masked() -> None:
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5000", "GET", f"/metrics?token={KEY}&model=m", "1.1", 200),
        None,
    )
    line = _format(record, uvicorn.logging.AccessFormatter("%(client_addr)s %(request_line)s"))
    assert line == "127.0.0.1:5000 GET /metrics?token=[redacted]&model=m HTTP/1.1"


def test_keys_in_dict_arguments_objects_and_tracebacks_are_masked() -> None:
    class Url:
        def __str__(self) -> str:
            return f"ws://h/v1/realtime?api_key={KEY}"

    formatter = logging.Formatter("%(message)s")
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%(u)s", ({"u": Url()},), None)
    assert _format(record, formatter) == "ws://h/v1/realtime?api_key=[redacted]"
    try:
        raise ValueError(f"bad uri /v1/realtime?access_token={KEY}")
    except ValueError:
        record = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "failed", (), exc_info=sys.exc_info()
        )
    text = _format(record, formatter)
    assert KEY not in text
    assert "access_token=[redacted]" in text


def test_words_that_merely_end_in_key_are_left_alone() -> None:
    assert redact("monkey=1 turkey=2 keys=3") == "monkey=1 turkey=2 keys=3"
    assert redact("model=m&voice=v") == "model=m&voice=v"


@pytest.fixture
def uvicorn_logging() -> Iterator[io.StringIO]:
    """uvicorn's loggers configured by `uvicorn_log_config()`, writing to one buffer."""
    config = uvicorn_log_config()
    for handler in config["handlers"].values():
        handler["stream"] = "ext://sys.stdout"
    loggers = {name: logging.getLogger(name) for name in config["loggers"]}
    saved = {name: (lg.handlers[:], lg.level, lg.propagate) for name, lg in loggers.items()}
    buffer = io.StringIO()
    logging.config.dictConfig(config)
    for name in config["loggers"]:
        for handler in logging.getLogger(name).handlers:
            handler.setStream(buffer)  # type: ignore[attr-defined]
    yield buffer
    for name, (handlers, level, propagate) in saved.items():
        lg = loggers[name]
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate = propagate


def test_uvicorn_log_config_masks_both_uvicorn_logs(uvicorn_logging: io.StringIO) -> None:
    logging.getLogger("uvicorn.error").info(
        '%s - "WebSocket %s" [accepted]', "127.0.0.1:5", f"/v1/realtime?token={KEY}"
    )
    logging.getLogger("uvicorn.access").info(
        '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", f"/readyz?key={KEY}", "1.1", 200
    )
    text = uvicorn_logging.getvalue()
    assert KEY not in text
    assert "/v1/realtime?token=[redacted]" in text
    assert "/readyz?key=[redacted]" in text
