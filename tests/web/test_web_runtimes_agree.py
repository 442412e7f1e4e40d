"""The browser runtime agrees with Python: the `node --test` suites of `tests/web/` pass,
and 200 fresh seeded random traces (not committed) replay identically in Node. Node is
installed by `make system-deps`: without it these tests fail (tests/system_tools.py).
Also B9: the session payloads the UI code sends in each mode pass the public session
validator."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from spec.session_config import validate_session
from tests.system_tools import node_binary
from tests.web.trace_scenarios import random_trace, render

ROOT = Path(__file__).resolve().parents[2]

FRESH_SEEDS = range(1000, 1200)


def node(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run `node` in the repository root (`timeout`: a hang guard, not a speed bound)."""
    return subprocess.run(
        [node_binary(), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_node_suites_pass() -> None:
    suites = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "web").glob("*.test.mjs"))
    assert suites
    result = node("--test", *suites)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_fresh_random_traces_replay_identically_in_the_browser_runtime(tmp_path: Path) -> None:
    for seed in FRESH_SEEDS:
        (tmp_path / f"random_{seed}.json").write_text(render(random_trace(seed)))
    result = node("tests/web/replay.mjs", str(tmp_path))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["replayed"] == len(FRESH_SEEDS)
    assert report["mismatches"] == [], json.dumps(report["mismatches"][:1], indent=1)[:4000]


@pytest.mark.parametrize(
    "turn_detection",
    ["semantic_vad_auto", "semantic_vad_low", "semantic_vad_medium", "semantic_vad_high"],
)
def test_b32_the_ui_offers_semantic_vad_at_each_eagerness(turn_detection: str) -> None:
    """Hands-free with semantic VAD: both client runtimes send the same payload, and the
    public validator accepts it with that eagerness."""
    from core.client_protocol import ClientProtocol

    script = (
        "import {ClientProtocol} from './web/js/client_protocol.js';"
        "import {diskSpec} from './tests/web/helpers.mjs';"
        "const p = new ClientProtocol(await diskSpec(), 'vad', "
        f"{{turn_detection: '{turn_detection}'}});"
        "console.log(JSON.stringify(p.connected(0)[0].event));"
    )
    result = node("--input-type=module", "-e", script)
    assert result.returncode == 0, result.stderr
    event = json.loads(result.stdout)
    python = ClientProtocol("vad", turn_detection=turn_detection)
    assert event["session"] == python.connection.session_payload
    config = validate_session(event["session"])
    assert config.turn_detection is not None
    assert config.turn_detection.type == "semantic_vad"
    assert config.turn_detection.eagerness == turn_detection.removeprefix("semantic_vad_")
    assert config.turn_detection.interrupt_response


@pytest.mark.parametrize("mode", ["ptt", "vad"])
def test_b09_ui_session_payload_passes_the_public_validator(mode: str) -> None:
    script = (
        "import {ClientProtocol} from './web/js/client_protocol.js';"
        "import {diskSpec} from './tests/web/helpers.mjs';"
        f"const p = new ClientProtocol(await diskSpec(), '{mode}');"
        "console.log(JSON.stringify(p.connected(0)[0].event));"
    )
    result = node("--input-type=module", "-e", script)
    assert result.returncode == 0, result.stderr
    event = json.loads(result.stdout)
    assert event["type"] == "session.update"
    config = validate_session(event["session"])
    assert config.input_format.rate_hz == 16_000
    assert config.output_format.rate_hz == 24_000
    if mode == "vad":
        assert config.turn_detection is not None
        assert config.turn_detection.interrupt_response
    else:
        assert config.turn_detection is None
