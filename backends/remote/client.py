"""`RemoteStage`: the HTTP side every remote stage shares.

- One pooled `httpx.AsyncClient` per stage (HTTP/1.1 keep-alive; `Authorization:
  Bearer` when the stage has a key; `timeout_s` is the longest wait for the next bytes,
  `connect_timeout_s` the longest connect).
- `stream()` is the only way a stage talks to its servers: it picks a replica from the
  `ReplicaPool` (least outstanding; with `session=` on a stage whose pool has session
  affinity, the session's previous replica while it is not overloaded), sends the
  request, checks the status and hands the response to the stage's reader, yielding
  what the reader yields. Every exception on that path goes through
  `translate_failure()` (`errors.py`, the one boundary); a failure that says so ejects
  the replica, and a retryable one is retried on another replica only while nothing has
  been yielded yet, so the session never sees a reply start twice.
- Cancellation is closing the stream: when the consumer stops (barge-in, `aclose()`,
  a cancelled scope) the response is closed, its connection dropped, and vLLM aborts
  a request whose client disconnected. `abort(request_id)` closes it too, from outside.
- A background prober re-checks every ejected replica's health endpoint (`GET
  /health`, 200 = healthy) every `probe_interval_s` and readmits it; `warmup()` probes
  every replica once, so a stage whose servers are all down starts out of service
  (`/readyz` 503 naming it) instead of failing the start, and comes back by itself.
- Each request leaves a `RequestTiming` (sent, headers, first item, end) in `timings`:
  the stage servers' own time, from which the server overhead of a turn is measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import httpx

from backends.base import BackendError, BackendUnavailable, StageLifecycle
from backends.remote.errors import HttpStatusError, translate_failure
from backends.remote.pool import Replica, ReplicaPool

if TYPE_CHECKING:
    from collections.abc import AsyncGenerator, AsyncIterator, Callable

    from backends.remote.config import StageConfig

__all__ = ["RemoteStage", "RequestTiming"]

log = logging.getLogger("joyduplex.backends.remote")

T = TypeVar("T")

#: a health probe's own deadline (connect and read)
PROBE_TIMEOUT_S = 2.0
#: requests whose timings are kept per stage
TIMINGS_KEPT = 512


@dataclass(slots=True)
class RequestTiming:
    """One request's life as this client saw it (anyio clock, seconds)."""

    request_id: str
    replica: str
    sent: float
    headers: float | None = None  # status line and headers arrived
    first_item: float | None = None  # the reader produced its first item
    items: list[float] = field(default_factory=list)  # when each item arrived
    end: float | None = None
    ok: bool = False
    attempt: int = 1


class RemoteStage(StageLifecycle):
    """One stage served by a fleet of OpenAI-compatible HTTP servers."""

    name = "remote"
    #: whether the stage's pool keeps a session on one replica (`config.session_affinity`
    #: decides within a stage that does); only a stage whose servers cache state across a
    #: session's requests gains from it
    session_affinity = False

    def __init__(
        self,
        config: StageConfig,
        *,
        probe_interval_s: float = 2.0,
        connect_timeout_s: float = 2.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.config = config
        affine = self.session_affinity and config.session_affinity
        self.pool = ReplicaPool(
            config.stage, config.urls, affinity_slack=config.affinity_slack if affine else None
        )
        self.probe_interval_s = probe_interval_s
        self.connect_timeout_s = connect_timeout_s
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._prober: asyncio.Task[None] | None = None
        self._open: dict[str, httpx.Response] = {}
        self.timings: deque[RequestTiming] = deque(maxlen=TIMINGS_KEPT)

    # --- lifecycle --------------------------------------------------------------------

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            raise BackendUnavailable(f"{self.name}: the stage is not loaded", stage=self.name)
        return self._client

    async def load(self) -> None:
        headers = {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}
        self._client = httpx.AsyncClient(
            headers=headers,
            timeout=httpx.Timeout(self.config.timeout_s, connect=self.connect_timeout_s),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            transport=self._transport,
            follow_redirects=False,
        )
        self._prober = asyncio.get_running_loop().create_task(
            self._probe_forever(), name=f"joyduplex-{self.name}-prober"
        )

    async def release(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prober
            self._prober = None
        for response in list(self._open.values()):
            with contextlib.suppress(Exception):
                await response.aclose()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def warmup(self) -> None:
        """Probe every replica once: the ones that do not answer start ejected."""
        async with anyio.create_task_group() as tg:
            for replica in self.pool.replicas:
                tg.start_soon(self._probe, replica, True)

    async def abort(self, request_id: str) -> None:
        """Close the request's stream: the server sees the disconnect and aborts it."""
        response = self._open.pop(request_id, None)
        if response is not None:
            await response.aclose()

    # --- health -----------------------------------------------------------------------

    async def _probe(self, replica: Replica, initial: bool = False) -> bool:
        url = replica.url + self.config.health_path
        try:
            response = await self.client.get(url, timeout=PROBE_TIMEOUT_S)
            healthy = response.status_code == 200
            why = f"health check answered {response.status_code}"
        except httpx.HTTPError as exc:
            healthy = False
            why = f"health check failed: {type(exc).__name__}"
        if healthy:
            self.pool.readmit(replica)
        elif initial:
            self.pool.eject(replica, why)
        return healthy

    async def _probe_forever(self) -> None:
        while True:
            await anyio.sleep(self.probe_interval_s)
            ejected = self.pool.ejected
            if not ejected:
                continue
            try:
                async with anyio.create_task_group() as tg:
                    for replica in ejected:
                        tg.start_soon(self._probe, replica)
            except Exception:  # pragma: no cover - a probe never raises; keep probing
                log.exception("%s: health probing failed", self.name)

    # --- requests ---------------------------------------------------------------------

    async def stream(
        self,
        request_id: str,
        path: str,
        read: Callable[[httpx.Response], AsyncIterator[T]],
        *,
        session: str | None = None,
        **request: Any,
    ) -> AsyncGenerator[T, None]:
        """POST `path` (json=/files=/data= in `request`) to a replica; yield what `read`
        makes of the response. `session` names the session for the pool's affinity (a
        retry excludes the failed replica, so the session moves with it). See the module
        docstring for balancing, retries and cancellation; every failure leaves as a
        `BackendError`."""
        tried: list[Replica] = []
        yielded = False
        while True:
            replica = self.pool.acquire(exclude=tried, session=session)
            tried.append(replica)
            timing = RequestTiming(
                request_id, replica.url, anyio.current_time(), attempt=len(tried)
            )
            self.timings.append(timing)
            try:
                async with self.client.stream("POST", replica.url + path, **request) as response:
                    timing.headers = anyio.current_time()
                    if response.status_code >= 400:
                        body = (await response.aread()).decode("utf-8", "replace")
                        raise HttpStatusError(response.status_code, body)
                    self._open[request_id] = response
                    async for item in read(response):
                        now = anyio.current_time()
                        timing.items.append(now)
                        if timing.first_item is None:
                            timing.first_item = now
                        yielded = True
                        yield item
                timing.ok = True
                return
            except Exception as exc:
                failure = translate_failure(exc, stage=self.name, replica=replica.url)
                if failure.eject:
                    self.pool.eject(replica, failure.error.message)
                retry = failure.retryable and not yielded and not isinstance(exc, BackendError)
                if retry and any(r.healthy and r not in tried for r in self.pool.replicas):
                    log.warning("%s %s: %s; retrying", self.name, request_id, failure.error.message)
                    continue
                raise failure.error from exc
            finally:
                timing.end = anyio.current_time()
                self._open.pop(request_id, None)
                self.pool.release(replica)
