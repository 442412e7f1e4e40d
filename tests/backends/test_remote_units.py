"""The remote backend's parts on their own: config checks, the error boundary, the
replica pool's balancing and health rules (hypothesis), the PCM stream resampler, and
the retry rule of `RemoteStage.stream` (httpx.MockTransport: pure unit tests, no socket)."""

from __future__ import annotations

import datetime
import itertools
from pathlib import Path
from typing import Any

import anyio
import httpx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.base import (
    Backend,
    BackendTimeout,
    BackendUnavailable,
    InvalidPromptContext,
    StageFailed,
    VlmDecisionResult,
    VlmDelta,
    VlmRequest,
)
from backends.remote.audio import PcmStream, wav_bytes
from backends.remote.backend import create_backend
from backends.remote.config import RemoteConfigError, parse_remote_config
from backends.remote.errors import HttpStatusError, translate_failure
from backends.remote.pool import ReplicaPool
from spec.effects import PromptInput
from transport.cli import build_parser
from transport.settings import load_settings

A, B = "http://a:8000", "http://b:8000"


def table(**vlm: Any) -> dict[str, Any]:
    return {
        "asr": {"urls": [A], "model": "asr"},
        "vlm": {"urls": [A, B], "model": "vlm", **vlm},
        "tts": {"urls": B, "model": "tts", "voice": "vivian"},
    }


# --- configuration -------------------------------------------------------------------


def test_config_parses_and_fills_defaults() -> None:
    config = parse_remote_config(table(max_model_len=2048, max_tokens=48))
    assert config.asr is not None and config.asr.urls == (A,)
    assert config.vlm.budget_tokens == 2000 and config.vlm.timeout_s == 30.0
    assert config.tts.urls == (B,) and config.tts.sample_rate_hz == 24_000
    assert parse_remote_config(table(), profile="camera").asr is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"vlm": {"model": "m"}}, "`remote.vlm.urls` is required"),
        ({"vlm": {"urls": [], "model": "m"}}, "`remote.vlm.urls` must be a non-empty list"),
        ({"vlm": {"urls": ["ftp://x"], "model": "m"}}, "`remote.vlm.urls[0]` must be an http(s)"),
        (
            {"vlm": {"urls": [A, A + "/v1"], "model": "m"}},
            "`remote.vlm.urls[1]` must be the server root",
        ),
        ({"vlm": {"urls": [A, A], "model": "m"}}, "lists a server twice"),
        (
            {"vlm": {"urls": [A], "model": "m", "timeout_s": 0}},
            "`remote.vlm.timeout_s` must be greater",
        ),
        ({"vlm": {"urls": [A], "model": "m", "typo": 1}}, "unknown key `remote.vlm.typo`"),
        (
            {"tts": {"urls": [A], "model": "m", "sample_rate_hz": 100}},
            "`remote.tts.sample_rate_hz`",
        ),
        ({"vlm": {"urls": [A], "model": "m", "max_tokens": 9000}}, "leaves no room for the prompt"),
        (
            {"asr": {"urls": [A], "model": "m", "api_key_env": "JOYDUPLEX_NO_SUCH_VAR"}},
            "is not set",
        ),
        ({"extra": 1}, "unknown key `remote.extra`"),
        (
            {"vlm": {"urls": [A], "model": "m", "affinity_slack": -1}},
            "`remote.vlm.affinity_slack` must be a whole number of at least 0",
        ),
        (
            {"vlm": {"urls": [A], "model": "m", "session_affinity": "yes"}},
            "`remote.vlm.session_affinity` must be true or false",
        ),
        (
            {"tts": {"urls": [A], "model": "m", "affinity_slack": 1}},
            "unknown key `remote.tts.affinity_slack`",
        ),
        (
            {"vlm": {"urls": [A], "model": "m", "extra_body": 1}},
            "`remote.vlm.extra_body` must be a table",
        ),
        (
            {"vlm": {"urls": [A], "model": "m", "extra_body": {"max_tokens": 9}}},
            "`remote.vlm.extra_body.max_tokens` is set by the stage itself",
        ),
        (
            {"vlm": {"urls": [A], "model": "m", "extra_body": {"messages": []}}},
            "`remote.vlm.extra_body.messages` is set by the stage itself",
        ),
        (
            {"vlm": {"urls": [A], "model": "m", "extra_body": {"t": datetime.date(2026, 1, 1)}}},
            "must hold JSON values",
        ),
        (
            {"tts": {"urls": [A], "model": "m", "extra_body": {}}},
            "unknown key `remote.tts.extra_body`",
        ),
    ],
)
def test_config_errors_name_the_key(change: dict[str, Any], message: str) -> None:
    with pytest.raises(RemoteConfigError) as caught:
        parse_remote_config({**table(), **change})
    assert message in str(caught.value)


def test_config_requires_asr_only_for_speech() -> None:
    raw = table()
    del raw["asr"]
    with pytest.raises(RemoteConfigError, match=r"\[remote.asr\] is required"):
        parse_remote_config(raw)
    assert parse_remote_config(raw, profile="camera").asr is None
    with pytest.raises(RemoteConfigError, match=r"needs a \[remote\] table"):
        parse_remote_config(None)


@pytest.mark.parametrize(
    ("language", "languages"), [(None, None), ("en", ("en",)), ("de-DE", ("de",))]
)
def test_remote_asr_knows_only_the_language_it_is_configured_to_force(
    language: str | None, languages: tuple[str, ...] | None
) -> None:
    """A configured `language` wins over the session's on every request, so it is the
    one the ASR knows; without one Qwen3-ASR detects the language."""
    asr = {"urls": [A], "model": "asr"} | ({"language": language} if language else {})
    backend = create_backend(remote={**table(), "asr": asr}, profile="speech")
    assert backend.asr is not None
    assert backend.asr.languages == languages


def test_api_key_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOYDUPLEX_TEST_VLM_KEY", "s3cret")
    config = parse_remote_config(table(api_key_env="JOYDUPLEX_TEST_VLM_KEY"))
    assert config.vlm.api_key == "s3cret"


def test_server_settings_check_the_remote_table_before_start(tmp_path: Path) -> None:
    path = tmp_path / "joyduplex.toml"
    path.write_text('[server]\nbackend = "remote"\n[remote.vlm]\nurls = ["http://v:1"]\n')
    with pytest.raises(ValueError, match=r"\[remote.tts\] is required"):
        load_settings(path)
    path.write_text(
        '[server]\nbackend = "remote"\nprofile = "camera"\n[remote.vlm]\nurls = ["http://v:1"]\n'
        '[remote.tts]\nurls = ["http://t:1"]\nmodel = "t"\n'
    )
    with pytest.raises(ValueError, match=r"`remote.vlm.model` is required"):
        load_settings(path)
    path.write_text(
        '[server]\nbackend = "remote"\nprofile = "camera"\n'
        '[remote.vlm]\nurls = ["http://v:1"]\nmodel = "m"\n'
        '[remote.tts]\nurls = ["http://t:1"]\nmodel = "t"\n'
    )
    settings = load_settings(path)
    assert (
        settings.backend == "remote" and settings.backend_options["remote"]["vlm"]["model"] == "m"
    )
    with pytest.raises(ValueError, match=r"needs a \[remote\] table"):
        load_settings(None, backend="remote")
    assert build_parser().parse_args(["serve", "--backend", "remote"]).backend == "remote"


def test_create_backend_refuses_a_bad_table() -> None:
    with pytest.raises(BackendUnavailable, match="remote backend: unknown key"):
        create_backend(remote={**table(), "nope": 1})
    backend = create_backend(remote=table(), profile="camera")
    assert backend.asr is None and backend.vad is None
    assert backend.tts.output_sample_rate_hz == 24_000


# --- the error boundary --------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "stage", "kind", "eject", "retryable"),
    [
        (httpx.ConnectError("refused"), "vlm", BackendUnavailable, True, True),
        (httpx.ConnectTimeout("slow"), "vlm", BackendUnavailable, True, True),
        (httpx.RemoteProtocolError("peer closed"), "vlm", StageFailed, True, True),
        (httpx.ReadError("reset"), "tts", StageFailed, True, True),
        (httpx.ReadTimeout("quiet"), "vlm", BackendTimeout, False, False),
        (httpx.PoolTimeout("busy"), "vlm", BackendTimeout, False, False),
        (HttpStatusError(503, "loading"), "asr", StageFailed, True, True),
        (HttpStatusError(500, "boom"), "vlm", StageFailed, True, True),
        (HttpStatusError(429, "busy"), "vlm", BackendUnavailable, False, True),
        (HttpStatusError(401, "key"), "vlm", BackendUnavailable, False, False),
        (HttpStatusError(400, "too long"), "vlm", InvalidPromptContext, False, False),
        (HttpStatusError(400, "bad audio"), "asr", StageFailed, False, False),
        (HttpStatusError(404, "no model"), "tts", StageFailed, False, False),
        (ValueError("not json"), "vlm", StageFailed, False, False),
    ],
)
def test_translate_failure(
    exc: Exception, stage: str, kind: type[Exception], eject: bool, retryable: bool
) -> None:
    failure = translate_failure(exc, stage=stage, replica=A)
    assert type(failure.error) is kind
    assert failure.error.stage == stage and A in failure.error.message
    assert (failure.eject, failure.retryable) == (eject, retryable)


def test_backend_errors_pass_unchanged() -> None:
    error = InvalidPromptContext("frame", stage="vlm")
    failure = translate_failure(error, stage="vlm", replica=A)
    assert failure.error is error and not failure.eject and not failure.retryable


# --- the pool ------------------------------------------------------------------------


def test_least_outstanding_with_round_robin_ties() -> None:
    pool = ReplicaPool("vlm", ["a", "b", "c"])
    first, second, third = pool.acquire(), pool.acquire(), pool.acquire()
    assert [r.url for r in (first, second, third)] == ["a", "b", "c"]
    pool.release(second)
    assert pool.acquire() is second  # the only one with fewer outstanding
    pool.release(first)
    pool.release(third)
    assert pool.acquire().url == "c"  # the tie is broken after the last pick (b)


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), st.sets(st.integers(0, 3), max_size=3)),
        st.tuples(st.just("release"), st.integers(0, 50)),
        st.tuples(st.just("eject"), st.integers(0, 3)),
        st.tuples(st.just("readmit"), st.integers(0, 3)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 4), ops=_ops)
def test_pool_never_picks_an_ejected_replica_and_readiness_never_sticks(
    n: int, ops: list[tuple[str, Any]]
) -> None:
    pool = ReplicaPool("vlm", [f"r{i}" for i in range(n)])
    backend = Backend(name="remote", vad=None, asr=None, vlm=None, tts=None)  # type: ignore[arg-type]
    flips: list[bool] = []

    def changed(up: bool, why: str) -> None:
        flips.append(up)
        if up:
            backend.restore("vlm")
        else:
            backend.evict("vlm", why)

    pool.on_change(changed)
    held = []
    for op, arg in ops:
        if op == "acquire":
            exclude = [pool.replicas[i] for i in arg if i < n]
            candidates = [r for r in pool.replicas if r.healthy and r not in exclude]
            loads = {r.index: r.outstanding for r in candidates}
            if not candidates:
                with pytest.raises(BackendUnavailable):
                    pool.acquire(exclude)
                continue
            chosen = pool.acquire(exclude)
            assert chosen.healthy and chosen not in exclude  # never an ejected replica
            assert loads[chosen.index] == min(loads.values())  # least outstanding
            held.append(chosen)
        elif op == "release" and held:
            pool.release(held.pop(arg % len(held)))
        elif op == "eject" and arg < n:
            pool.eject(pool.replicas[arg], "down")
        elif op == "readmit" and arg < n:
            pool.readmit(pool.replicas[arg])
        # readiness follows the pool exactly: out of service iff no healthy replica
        assert (not backend.dead) == pool.in_service
        assert all(a != b for a, b in itertools.pairwise(flips))  # real flips only
        assert sum(r.outstanding for r in pool.replicas) == len(held)
    for replica in pool.replicas:
        pool.readmit(replica)
    assert pool.in_service and not backend.dead  # every replica back: ready again


# --- session affinity (the VLM's pool) ----------------------------------------------


def test_consecutive_requests_of_a_session_stay_on_its_replica_while_it_is_free() -> None:
    plain, affine = ReplicaPool("vlm", ["a", "b"]), ReplicaPool("vlm", ["a", "b"], affinity_slack=1)
    for pool in (plain, affine):
        for _ in range(4):
            pool.release(pool.acquire(session="s1"))
    assert [r.served for r in plain.replicas] == [2, 2]  # alternating: half the prompts cold
    assert [r.served for r in affine.replicas] == [4, 0]
    assert affine.session_replica("s1") is affine.replicas[0]


def test_a_session_stays_while_its_replica_is_within_the_slack() -> None:
    pool = ReplicaPool("vlm", ["a", "b"], affinity_slack=1)
    first = pool.acquire(session="s1")  # still streaming (e.g. a speculative turn)
    assert pool.acquire(session="s1") is first  # one more than the idle replica: stays


def test_two_sessions_spread_over_two_replicas() -> None:
    pool = ReplicaPool("vlm", ["a", "b"], affinity_slack=1)
    one, two = pool.acquire(session="s1"), pool.acquire(session="s2")  # both in flight
    assert one is not two
    pool.release(one)
    pool.release(two)
    for _ in range(3):  # turn by turn, each on its own replica
        for session, replica in (("s1", one), ("s2", two)):
            chosen = pool.acquire(session=session)
            assert chosen is replica
            pool.release(chosen)
    assert [r.served for r in pool.replicas] == [4, 4]


def test_a_new_session_goes_after_the_last_pick_when_replicas_are_idle() -> None:
    pool = ReplicaPool("vlm", ["a", "b"], affinity_slack=1)
    pool.release(pool.acquire(session="s1"))
    pool.release(pool.acquire(session="s1"))
    assert pool.acquire(session="s2").url == "b"  # balanced, not piled onto s1's replica


def test_a_session_whose_replica_is_busier_than_the_slack_moves() -> None:
    pool = ReplicaPool("vlm", ["a", "b"], affinity_slack=1)
    a, b = pool.replicas
    pool.release(pool.acquire(session="s1"))
    other = pool.acquire(exclude=[b], session="s2")  # another session's turn on a
    assert pool.acquire(session="s1") is a  # a: 1 <= b: 0 + 1, stays
    assert pool.acquire(session="s1") is b  # a: 2 > b: 0 + 1, moves
    assert pool.session_replica("s1") is b  # ... and its replica is now b
    for replica in (other, a, b):
        pool.release(replica)
    assert pool.acquire(session="s1") is b


def test_a_slack_of_zero_keeps_a_session_only_on_a_least_loaded_replica() -> None:
    pool = ReplicaPool("vlm", ["a", "b"], affinity_slack=0)
    first = pool.acquire(session="s1")
    assert pool.acquire(session="s1") is not first


def test_a_session_leaves_a_replica_that_failed() -> None:
    pool = ReplicaPool("vlm", ["a", "b"], affinity_slack=1)
    a, b = pool.replicas
    pool.release(pool.acquire(session="s1"))
    # a retry excludes the replica the request failed on: the session moves with it
    assert pool.acquire(exclude=[a], session="s1") is b
    pool.release(b)
    assert pool.acquire(session="s1") is b
    pool.release(b)
    pool.eject(b, "connection refused")  # ejected: the session moves again
    assert pool.acquire(session="s1") is a
    pool.release(a)
    pool.readmit(b)  # back in rotation, but the session's prefix is on a now
    assert pool.acquire(session="s1") is a


def test_the_memory_of_sessions_is_bounded_least_recently_used_first() -> None:
    pool = ReplicaPool("vlm", ["a", "b"], affinity_slack=1, affinity_sessions=3)
    for session in ("s1", "s2", "s3"):
        pool.release(pool.acquire(session=session))
    pool.release(pool.acquire(session="s1"))  # s1 used again: s2 is now the oldest
    pool.release(pool.acquire(session="s4"))
    assert pool.session_replica("s2") is None
    assert all(pool.session_replica(s) is not None for s in ("s1", "s3", "s4"))
    assert len(pool._sessions) == 3


def test_requests_without_a_session_or_without_affinity_are_not_remembered() -> None:
    affine, plain = ReplicaPool("vlm", ["a"], affinity_slack=1), ReplicaPool("asr", ["a"])
    affine.release(affine.acquire())
    plain.release(plain.acquire(session="s1"))
    assert not affine._sessions and not plain._sessions


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 4), slack=st.integers(0, 2), ops=_ops, sessions=st.data())
def test_an_affine_pick_is_healthy_and_within_the_slack_of_the_least_loaded(
    n: int, slack: int, ops: list[tuple[str, Any]], sessions: st.DataObject
) -> None:
    pool = ReplicaPool("vlm", [f"r{i}" for i in range(n)], affinity_slack=slack)
    held = []
    for op, arg in ops:
        if op == "acquire":
            exclude = [pool.replicas[i] for i in arg if i < n]
            candidates = [r for r in pool.replicas if r.healthy and r not in exclude]
            if not candidates:
                continue
            loads = {r.index: r.outstanding for r in candidates}
            session = sessions.draw(st.sampled_from(["s1", "s2", "s3"]))
            previous = pool.session_replica(session)
            chosen = pool.acquire(exclude, session=session)
            assert chosen.healthy and chosen not in exclude
            assert loads[chosen.index] <= min(loads.values()) + slack
            if previous in candidates and loads[previous.index] <= min(loads.values()) + slack:
                assert chosen is previous  # kept whenever it may be
            elif chosen is not previous:
                assert loads[chosen.index] == min(loads.values())  # moved: least loaded
            assert pool.session_replica(session) is chosen
            held.append(chosen)
        elif op == "release" and held:
            pool.release(held.pop(arg % len(held)))
        elif op == "eject" and arg < n:
            pool.eject(pool.replicas[arg], "down")
        elif op == "readmit" and arg < n:
            pool.readmit(pool.replicas[arg])
        assert sum(r.outstanding for r in pool.replicas) == len(held)


# --- audio ---------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    rates=st.sampled_from([(24_000, 16_000), (24_000, 24_000), (24_000, 48_000), (22_050, 16_000)]),
    cuts=st.lists(st.integers(0, 4000), max_size=12),
)
def test_pcm_stream_is_one_signal_whatever_the_chunking(
    rates: tuple[int, int], cuts: list[int]
) -> None:
    source_hz, target_hz = rates
    rng = np.random.default_rng(0)
    pcm = (rng.standard_normal(3001) * 3000).astype("<i2").tobytes()
    whole = PcmStream(source_hz, target_hz).feed(pcm)
    stream = PcmStream(source_hz, target_hz)
    bounds = sorted({0, len(pcm), *(c for c in cuts if c < len(pcm))})
    pieces = [stream.feed(pcm[a:b]) for a, b in itertools.pairwise(bounds)]
    assert b"".join(pieces) == whole
    assert all(len(p) % 2 == 0 for p in pieces)
    samples = len(whole) // 2
    assert abs(samples - 3001 * target_hz / source_hz) <= 1


def test_wav_bytes_is_a_16_bit_mono_wav() -> None:
    data = wav_bytes(np.zeros(160, dtype=np.float32), 16_000)
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE" and len(data) == 44 + 320


# --- retries on the wire (MockTransport) ---------------------------------------------


class _Broken(httpx.AsyncByteStream):
    """A body that delivers some bytes, then loses the connection."""

    def __init__(self, first: bytes) -> None:
        self.first = first

    async def __aiter__(self) -> Any:
        yield self.first
        raise httpx.RemoteProtocolError("peer closed connection")


def _sse(*pieces: str) -> bytes:
    import json

    events = [f"data: {json.dumps({'choices': [{'delta': {'content': p}}]})}\n\n" for p in pieces]
    return ("".join(events) + "data: [DONE]\n\n").encode()


def _generate(handler: Any) -> tuple[list[Any], Any]:
    backend = create_backend(
        remote=table(), profile="camera", transport=httpx.MockTransport(handler)
    )

    async def main() -> list[Any]:
        async with backend.vlm:
            request = VlmRequest("r1", PromptInput(system="s", transcript="hi"))
            return [out async for out in backend.vlm.generate(request)]

    return anyio.run(main), backend


def test_5xx_before_the_first_byte_is_retried_on_the_other_replica() -> None:
    hosts: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        if request.url.host == "a":
            return httpx.Response(503, text="loading")
        return httpx.Response(200, content=_sse("</response>", " Hi."))

    out, backend = _generate(handler)
    assert hosts == ["a", "b"]
    assert out == [
        VlmDelta("r1", "Hi."),
        VlmDecisionResult("r1", action=out[-1].action, text="Hi."),
    ]
    assert [r.healthy for r in backend.vlm.pool.replicas] == [False, True]  # type: ignore[attr-defined]


def _turn_hosts(handler: Any, ids: list[str], **vlm: Any) -> tuple[list[str], Any]:
    """The VLM hosts a sequence of turns (engine request ids) went to, one at a time."""
    hosts: list[str] = []

    def recording(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        return handler(request)

    backend = create_backend(
        remote=table(**vlm), profile="camera", transport=httpx.MockTransport(recording)
    )

    async def main() -> None:
        async with backend.vlm:
            for request_id in ids:
                request = VlmRequest(request_id, PromptInput(system="s", transcript="hi"))
                async for _ in backend.vlm.generate(request):
                    pass

    anyio.run(main)
    return hosts, backend


def _answer(request: httpx.Request) -> httpx.Response:
    return httpx.Response(200, content=_sse("</response>", " Hi."))


def test_a_sessions_turns_and_speculations_stay_on_one_vlm_replica() -> None:
    ids = [
        "sess_x/resp_1:vlm:1",
        "sess_x/spec_2:vlm:1",
        "sess_x/resp_3:vlm:1",
        "sess_y/resp_1:vlm:1",
    ]
    hosts, backend = _turn_hosts(_answer, ids)
    assert hosts == ["a", "a", "a", "b"]
    assert backend.tts.pool.affinity_slack is None  # type: ignore[attr-defined]
    hosts, _ = _turn_hosts(_answer, ids, session_affinity=False)
    assert hosts == ["a", "b", "a", "b"]  # load alone: ties alternate


def test_a_session_retried_on_the_other_replica_stays_there() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "a":
            return httpx.Response(503, text="loading")
        return _answer(request)

    ids = ["sess_x/resp_1:vlm:1", "sess_x/resp_2:vlm:1"]
    hosts, _ = _turn_hosts(handler, ids)
    assert hosts == ["a", "b", "b"]  # a ejected on the first turn; the session moved


def test_connection_lost_after_the_first_piece_fails_once_without_retry() -> None:
    hosts: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        hosts.append(request.url.host)
        first = _sse("</response>", " Hello there").removesuffix(b"data: [DONE]\n\n")
        return httpx.Response(200, stream=_Broken(first))

    with pytest.raises(StageFailed, match="lost the connection mid-response"):
        _generate(handler)
    assert hosts == ["a"]  # never retried: a piece had reached the caller


def test_prompt_the_server_rejects_is_request_local() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": {"message": "maximum context length"}})

    with pytest.raises(InvalidPromptContext, match="maximum context length"):
        _generate(handler)


def test_undecodable_frame_is_refused_before_sending() -> None:
    backend = create_backend(remote=table(), profile="camera")
    request = VlmRequest("r1", PromptInput(system="s", transcript="hi", frames=(b"GIF89a",)))
    with pytest.raises(InvalidPromptContext, match=r"frames\[0\]"):
        backend.vlm.body(request)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("asked", "sent"), [(None, 48), (16, 16), (48, 48), (4096, 48)])
def test_the_reply_cap_is_the_session_cap_within_the_stage_cap_and_extra_body_adds_fields(
    asked: int | None, sent: int
) -> None:
    extra = {"ignore_eos": True, "min_tokens": 4}
    backend = create_backend(
        remote=table(max_tokens=48, extra_body=extra),
        profile="camera",
        transport=httpx.MockTransport(lambda _: httpx.Response(500)),
    )
    request = VlmRequest("r1", PromptInput(system="s", transcript="hi"), max_tokens=asked)
    body = backend.vlm.body(request)  # type: ignore[attr-defined]
    assert body["max_tokens"] == sent
    assert (body["ignore_eos"], body["min_tokens"], body["stream"]) == (True, 4, True)
    assert body["temperature"] == 0.8 and body["model"] == "vlm"
