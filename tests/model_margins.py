"""Assertions on a model's output that keep, and report, their margin from the threshold.

A model's score is not a property of the audio alone: the CPU's kernels (AVX-512 or AVX2),
onnxruntime's and numpy's versions move it, and the test audio itself is made by a model
(Piper) that moves with them. On a CPU without AVX-512 one complete sentence went from
0.69 to 0.19 under Smart Turn's 0.5. So a test asserts the behaviour at the product's own
threshold, on a case chosen far from it, and says how far: every `expect_*` call prints
its margin and records it, the run's summary lists them smallest first, and
`tools/model_margins.py` runs the tests marked `model_output` on this CPU and on an
emulated AVX2 one and fails when a margin is under `REQUIRED` on either.

Units and the margin each keeps:
- `probability` (Silero's speech probability, Smart Turn's end-of-turn score, Whisper's
  probability of a word it wrote): 0.15.
- `ms` (a speech boundary against its tolerance): 32 ms, one VAD frame, the step by which
  a boundary moves when a score crosses its threshold a frame earlier or later. A boundary
  with less slack keeps its margin when the frames that decide it (`deciding`: Silero's
  probabilities on either side of each threshold crossing that places it) are all 0.15 or
  more from that threshold: then no frame changes sides, and the boundary cannot move.
- `ratio` (a duration against the one expected, as a fraction off it): 0.15.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

REQUIRED = {"probability": 0.15, "ms": 32.0, "ratio": 0.15}
#: where `tools/model_margins.py` asks a run to write what it recorded
REPORT_ENV = "JOYDUPLEX_MARGINS_JSON"

Unit = Literal["probability", "ms", "ratio"]


@dataclass(frozen=True)
class Margin:
    """One model output against the threshold the test holds it to."""

    test: str
    what: str
    value: float
    threshold: float
    side: Literal["above", "below", "within"]
    unit: Unit
    #: for a boundary: the smallest distance of its deciding frames' scores from their
    #: thresholds (see the module docstring)
    deciding: float | None = None

    @property
    def margin(self) -> float:
        if self.side == "above":
            return self.value - self.threshold
        if self.side == "below":
            return self.threshold - self.value
        return self.threshold - abs(self.value)

    @property
    def kept(self) -> bool:
        steady = self.deciding is not None and self.deciding >= REQUIRED["probability"]
        return self.margin >= REQUIRED[self.unit] or steady

    def line(self) -> str:
        relation = {"above": ">=", "below": "<", "within": "|x| <="}[self.side]
        flag = "" if self.kept else f"  UNDER the {REQUIRED[self.unit]:g} kept"
        deciding = "" if self.deciding is None else f" (deciding frames {self.deciding:+.3f})"
        return (
            f"{self.margin:+8.3f} {self.unit:<11} {self.what}: {self.value:.3f} "
            f"{relation} {self.threshold:g}{deciding}{flag}"
        )


#: the run's margins, in the process that reports the run (the only one under `pytest`,
#: the controller under pytest-xdist's `-n`): tests/conftest.py moves each test's margins
#: from where it ran into its report (`user_properties`) and from the report into here, so
#: a distributed run's summary and report hold every worker's margins
RECORDED: list[Margin] = []
#: the margins recorded in this process since its last test report took them
_PENDING: list[Margin] = []
#: the `user_properties` name a margin travels under
PROPERTY = "model_margin"


def _record(margin: Margin) -> Margin:
    _PENDING.append(margin)
    print(f"margin {margin.line()}")
    return margin


def take_pending() -> list[tuple[str, dict[str, object]]]:
    """This process's margins since the last call, as `user_properties` entries (plain
    data, which pytest-xdist carries from a worker to the controller)."""
    taken = [(PROPERTY, asdict(m)) for m in _PENDING]
    _PENDING.clear()
    return taken


def collect(user_properties: list[tuple[str, object]]) -> None:
    """Add the margins a test report carries to the run's."""
    for name, value in user_properties:
        if name == PROPERTY and isinstance(value, dict):
            RECORDED.append(Margin(**value))


def _test_id() -> str:
    return os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" (", 1)[0]


def expect_above(value: float, threshold: float, what: str, unit: Unit = "probability") -> None:
    """Assert `value >= threshold` (the product's rule) and record the margin."""
    margin = _record(Margin(_test_id(), what, float(value), threshold, "above", unit))
    assert margin.value >= threshold, margin.line()


def expect_below(value: float, threshold: float, what: str, unit: Unit = "probability") -> None:
    """Assert `value < threshold` and record the margin."""
    margin = _record(Margin(_test_id(), what, float(value), threshold, "below", unit))
    assert margin.value < threshold, margin.line()


def expect_within(
    offset: float,
    tolerance: float,
    what: str,
    unit: Unit = "ms",
    *,
    deciding: float | None = None,
) -> None:
    """Assert `|offset| <= tolerance` and record the margin; `deciding`: for a boundary,
    how far the scores that place it are from their thresholds."""
    margin = Margin(_test_id(), what, float(offset), tolerance, "within", unit, deciding)
    _record(margin)
    assert abs(margin.value) <= tolerance, margin.line()


def summary_lines() -> list[str]:
    """The run's margins, smallest (relative to what is kept) first."""
    ordered = sorted(RECORDED, key=lambda m: (m.kept, m.margin / REQUIRED[m.unit]))
    under = sum(not m.kept for m in ordered)
    head = (
        f"{len(ordered)} model-output margins, {under} under what is kept (tests/model_margins.py)"
    )
    return [head, *(f"{m.line()}  [{m.test}]" for m in ordered)]


def write_report() -> None:
    """Write the recorded margins where `REPORT_ENV` says (the measuring tool reads it)."""
    target = os.environ.get(REPORT_ENV)
    if target:
        rows = [{**asdict(m), "margin": m.margin, "required": REQUIRED[m.unit]} for m in RECORDED]
        Path(target).write_text(json.dumps(rows, indent=1))
