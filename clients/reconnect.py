"""`resume_after_drop`: the Python client's way back into a session after a network drop,
on the same resume link as the browser's (B42, `core.statemachines.client_resume`).

    async with DuplexClient.connect(url + "?resumable=1") as client:
        ...                                   # the socket fails: ConnectionLost
    async with resume_after_drop(url, client.resume_state) as client:
        ...                                   # the same session; the replay arrives first

The link decides everything but the I/O: when each attempt starts (a backoff of 250 ms
doubling to 2 s, scaled by a jitter drawn here, since the core draws none), how many
attempts and how long in all (20, 30 s from the drop), and which answers end the
session (`unknown_session`, `invalid_resume_token`, ...: the server no longer holds it).
Each attempt is `DuplexClient.connect(url, resume=state)`, its socket's opening bounded by
the attempt timeout; a socket that cannot be opened, closes, or does not answer in time is
a failed attempt.
"""

from __future__ import annotations

import random
import time
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from clients.duplex_client import ConnectionLost, DuplexClient, ResumeState, ServerError
from clients.errors import SessionLost
from core.statemachines.client_outbox import ClientOutbox
from core.statemachines.client_resume import ResumeLink
from spec.tables.client_constants import RESUME_ATTEMPT_TIMEOUT_MS
from spec.tables.client_resume import RESUME_REFUSALS, LinkState

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

__all__ = ["resume_after_drop"]


def _now_ms() -> float:
    return time.monotonic() * 1000


@asynccontextmanager
async def resume_after_drop(
    url: str,
    state: ResumeState,
    *,
    token: str | None = None,
    headers: Mapping[str, str] | None = None,
    jitter: Callable[[], float] = random.random,
    clock: Callable[[], float] = _now_ms,
    sleep: Callable[[float], Awaitable[Any]] = anyio.sleep,
) -> AsyncIterator[DuplexClient]:
    """Resume the session `state` names (its socket failed just now) and yield the client
    of the new connection; closes it on exit. `jitter`, `clock` (ms) and `sleep` (s) are
    injectable for tests.

    Raises:
        SessionLost: the server no longer holds the session, or the attempts ran out.
    """
    link = ResumeLink(ClientOutbox())
    link.session_id, link.resume_token = state.session_id, state.resume_token
    link.last_server_event_seq = state.last_server_event_seq
    link.fire("drop", now_ms=clock(), jitter=jitter())
    async with AsyncExitStack() as stack:
        while True:
            assert link.next_attempt_ms is not None
            await sleep(max(0.0, link.next_attempt_ms - clock()) / 1000)
            link.fire("attempt", now_ms=clock(), why="out_of_time")
            _raise_if_lost(link)
            try:
                # (the client's own task group is entered here: no cancel scope may wrap
                # it, so the attempt timeout bounds the socket's opening, and
                # DuplexClient's own bound the wait for session.resumed)
                client = await stack.enter_async_context(
                    DuplexClient.connect(
                        url,
                        token=token,
                        headers=headers,
                        resume=state,
                        open_timeout=RESUME_ATTEMPT_TIMEOUT_MS / 1000,
                    )
                )
            except ServerError as exc:
                if exc.code not in RESUME_REFUSALS:
                    raise
                link.fire("refused", why=exc.code)
                _raise_if_lost(link)
            except (ConnectionLost, TimeoutError):
                link.fire("fail", now_ms=clock(), jitter=jitter(), why="out_of_time")
                _raise_if_lost(link)
                continue
            link.fire("resumed", now_ms=clock())
            yield client
            return


def _raise_if_lost(link: ResumeLink) -> None:
    if link.state is LinkState.LOST:
        notices = [o for o in link.outbox.drain() if o["kind"] == "notice"]
        raise SessionLost(notices[-1]["message"] if notices else "the session is lost")
