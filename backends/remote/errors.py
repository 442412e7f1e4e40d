"""The one boundary where HTTP failures become `BackendError`s: `translate_failure()`.

Every stage request of the remote backend runs through `RemoteStage.stream()`
(`client.py`), which hands whatever went wrong on the way (an httpx exception, an
error status, a body it could not read) to this one function. The answer says what the
failure means for the response and for the replica:

    what happened                         error                 eject  retry elsewhere
    connection refused / connect timeout  BackendUnavailable    yes    yes
    connection lost (reset, EOF, broken   StageFailed           yes    yes, before the
      chunked body) while streaming                                    first byte reached
                                                                       the session
    5xx (500, 502, 503, 504, ...)         StageFailed           yes    yes
    429 too many requests                 BackendUnavailable    no     yes
    read / write timeout (no bytes for    BackendTimeout        no     no (it may still
      `timeout_s`)                                                     be generating)
    local pool exhausted                  BackendTimeout        no     no
    400 / 413 / 422 on the VLM            InvalidPromptContext  no     no (request-local)
    401 / 403                             BackendUnavailable    no     no (the key is wrong)
    any other 4xx, an unreadable body     StageFailed           no     no

An ejected replica gets no request until its health endpoint answers 200 again
(`pool.py`). `BackendError`s pass unchanged; cancellation and other `BaseException`s
are never caught anywhere on this path. `EngineDead` is never raised: one replica failing
is not the stage dying; the stage goes out of service only when its pool has no healthy
replica left, and the pool itself reports that to the backend.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from backends.base import (
    BackendError,
    BackendTimeout,
    BackendUnavailable,
    InvalidPromptContext,
    StageFailed,
)

__all__ = ["Failure", "HttpStatusError", "translate_failure"]


class HttpStatusError(Exception):
    """A replica answered with an error status (raised by the client, translated here)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Failure:
    """What one failed attempt means."""

    error: BackendError
    eject: bool  # the replica looks down: take it out of rotation, probe it
    retryable: bool  # another replica may serve it, if nothing reached the session yet


def _detail(detail: str, limit: int = 300) -> str:
    text = " ".join(detail.split())
    return text if len(text) <= limit else text[:limit] + "..."


def translate_failure(exc: Exception, *, stage: str, replica: str) -> Failure:
    """The meaning of `exc`, raised while `replica` served a `stage` request."""
    at = f"{stage} replica {replica}"
    if isinstance(exc, BackendError):
        return Failure(exc, eject=False, retryable=False)
    if isinstance(exc, HttpStatusError):
        status, detail = exc.status, _detail(exc.detail)
        if status >= 500:
            return Failure(
                StageFailed(f"{at} answered {status}: {detail}", stage=stage),
                eject=True,
                retryable=True,
            )
        if status == 429:
            return Failure(
                BackendUnavailable(f"{at} is overloaded (429): {detail}", stage=stage),
                eject=False,
                retryable=True,
            )
        if status in (401, 403):
            return Failure(
                BackendUnavailable(
                    f"{at} refused the API key ({status}): check remote.{stage}.api_key",
                    stage=stage,
                ),
                eject=False,
                retryable=False,
            )
        if stage == "vlm" and status in (400, 413, 422):
            return Failure(
                InvalidPromptContext(
                    f"{at} cannot serve the prompt ({status}): {detail}", stage=stage
                ),
                eject=False,
                retryable=False,
            )
        return Failure(
            StageFailed(f"{at} answered {status}: {detail}", stage=stage),
            eject=False,
            retryable=False,
        )
    name = type(exc).__name__
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return Failure(
            BackendUnavailable(f"{at} is unreachable ({name}: {exc})", stage=stage),
            eject=True,
            retryable=True,
        )
    if isinstance(exc, httpx.PoolTimeout):
        return Failure(
            BackendTimeout(f"{at}: no free connection in the pool ({name})", stage=stage),
            eject=False,
            retryable=False,
        )
    if isinstance(exc, httpx.TimeoutException):
        return Failure(
            BackendTimeout(f"{at} sent nothing within the stage timeout ({name})", stage=stage),
            eject=False,
            retryable=False,
        )
    if isinstance(exc, httpx.TransportError):
        # RemoteProtocolError (the peer closed mid-response), ReadError, WriteError, ...
        return Failure(
            StageFailed(f"{at} lost the connection mid-response ({name}: {exc})", stage=stage),
            eject=True,
            retryable=True,
        )
    return Failure(
        StageFailed(f"{at}: unreadable response ({name}: {_detail(str(exc))})", stage=stage),
        eject=False,
        retryable=False,
    )
