"""The suite's own parallel run (tests/scheduling.py, tests/model_margins.py): the longest
tests start first, a group stays on one worker in one piece, and the margins a worker
records reach the run's report."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests import model_margins
from tests.scheduling import group_of, order_longest_first


@dataclass
class _Fixture:
    scope: str
    module: str

    @property
    def func(self) -> Any:
        def fixture() -> None: ...

        fixture.__module__ = self.module
        return fixture


@dataclass
class _Info:
    fixtures: dict[str, _Fixture]

    @property
    def names_closure(self) -> list[str]:
        return list(self.fixtures)

    @property
    def name2fixturedefs(self) -> dict[str, tuple[_Fixture, ...]]:
        return {name: (f,) for name, f in self.fixtures.items()}


@dataclass
class _Item:
    """What scheduling reads of a collected test."""

    nodeid: str
    markers: tuple[str, ...] = ()
    fixtures: dict[str, _Fixture] = field(default_factory=dict)

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.markers else None

    @property
    def _fixtureinfo(self) -> _Info:
        return _Info(self.fixtures)


MODEL = {"model": _Fixture("module", "tests.backends.test_m")}
PLUGIN = {"anyio_backend": _Fixture("module", "anyio.pytest_plugin")}


def _order(items: list[_Item]) -> list[str]:
    order_longest_first(items)  # type: ignore[arg-type]
    return [item.nodeid for item in items]


def test_the_emulated_test_starts_first_then_browser_then_slow_then_the_rest() -> None:
    items = [
        _Item("a.py::fast"),
        _Item("b.py::slow", ("slow",)),
        _Item("c.py::browser", ("browser",)),
        _Item("d.py::emulated", ("slow", "emulated")),
        _Item("a.py::fast2"),
    ]
    assert _order(items) == [
        "d.py::emulated",
        "c.py::browser",
        "b.py::slow",
        "a.py::fast",
        "a.py::fast2",
    ]


def test_a_module_sharing_a_loaded_model_moves_as_one_piece_at_its_slowest_tests_place() -> None:
    items = [
        _Item("m.py::fast", fixtures=MODEL),
        _Item("x.py::fast"),
        _Item("m.py::slow", ("slow",), fixtures=MODEL),
    ]
    assert [group_of(i) for i in items] == ["m.py", None, "m.py"]  # type: ignore[arg-type]
    assert _order(items) == ["m.py::fast", "m.py::slow", "x.py::fast"]


def test_a_plugins_module_fixture_groups_nothing_and_the_emulated_test_stays_alone() -> None:
    assert group_of(_Item("a.py::t", fixtures=PLUGIN)) is None  # type: ignore[arg-type]
    alone = _Item("m.py::emulated", ("slow", "emulated"), fixtures=MODEL)
    assert group_of(alone) is None  # type: ignore[arg-type]
    assert group_of(_Item("w.py::t", ("browser",))) == "browser"  # type: ignore[arg-type]


def test_a_margin_recorded_on_a_worker_reaches_the_report_through_its_test_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(model_margins, "RECORDED", [])
    monkeypatch.setattr(model_margins, "_PENDING", [])
    model_margins.expect_above(0.9, 0.5, "a verdict")
    # what pytest-xdist carries to the controller: plain data, through JSON here
    carried = json.loads(json.dumps(model_margins.take_pending()))
    assert model_margins.take_pending() == []  # taken once
    model_margins.collect([tuple(entry) for entry in carried])
    (margin,) = model_margins.RECORDED
    assert (margin.what, margin.value, margin.threshold, margin.kept) == (
        "a verdict",
        0.9,
        0.5,
        True,
    )
