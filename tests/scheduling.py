"""The order the suite runs in and, under pytest-xdist (`make test` runs `-n`), which
tests share a worker: `register` adds both to a run (tests/conftest.py calls it).

The order: longest first, so that a parallel run's tail is short. The test under an
emulated CPU (marked `emulated`: minutes) starts first, then the browser tests, then the
other `slow` tests, then the rest; the sort is stable, and a group (below) moves as one
unit, at the place of its first test.

The groups (`xdist_group`, honoured by `--dist loadgroup`):
- `browser`: every browser test, on one worker: they share one CPU server per process
  (tests/web/conftest.py), and one headless Chromium at a time keeps the two cores from
  being split between a browser's real-time audio and another's.
- a test module whose tests share a module-scoped fixture of its own or of a conftest
  (a loaded model, a served process), so the module's tests load it once, on one worker.
  Fixtures of plugins (anyio's `anyio_backend`) do not count.
Any other test is scheduled alone, on whichever worker is free.
"""

from __future__ import annotations

import pytest

__all__ = ["group_of", "order_longest_first", "register"]

#: the rank of each kind of test: lower runs first
_EMULATED, _BROWSER, _SLOW, _OTHER = range(4)


def _rank(item: pytest.Item) -> int:
    if item.get_closest_marker("emulated"):
        return _EMULATED
    if item.get_closest_marker("browser"):
        return _BROWSER
    if item.get_closest_marker("slow"):
        return _SLOW
    return _OTHER


def _shares_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    for name in info.names_closure:
        for fixturedef in info.name2fixturedefs.get(name, ()):
            module = getattr(fixturedef.func, "__module__", "") or ""
            if fixturedef.scope == "module" and module.startswith("tests."):
                return True
    return False


def group_of(item: pytest.Item) -> str | None:
    """The worker group `item` belongs to, or None when it may run anywhere."""
    if item.get_closest_marker("emulated"):
        return None  # alone: minutes of one core, started first
    if item.get_closest_marker("browser"):
        return "browser"
    if _shares_a_module_fixture(item):
        return item.nodeid.split("::", 1)[0]
    return None


def order_longest_first(items: list[pytest.Item]) -> None:
    """Sort `items` in place: by the lowest rank of the unit each belongs to (its group, or
    itself), then by where that unit first appeared; a group stays contiguous."""
    first_seen: dict[str, int] = {}
    unit_rank: dict[str, int] = {}
    units = []
    for index, item in enumerate(items):
        unit = group_of(item) or item.nodeid
        units.append(unit)
        first_seen.setdefault(unit, index)
        unit_rank[unit] = min(unit_rank.get(unit, _OTHER), _rank(item))
    keyed = sorted(
        zip(units, items, strict=True),
        key=lambda pair: (unit_rank[pair[0]], first_seen[pair[0]]),
    )
    items[:] = [item for _, item in keyed]


class _WorkerGroups:
    @pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            group = group_of(item)
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))


class _LongestFirst:
    @pytest.hookimpl(trylast=True)  # after every other reordering (pytest's, by parameters)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        order_longest_first(items)


def register(config: pytest.Config) -> None:
    """Mark the groups and order the tests of every run (tests/conftest.py calls it)."""
    config.pluginmanager.register(_WorkerGroups(), "joyduplex-worker-groups")
    config.pluginmanager.register(_LongestFirst(), "joyduplex-longest-first")
