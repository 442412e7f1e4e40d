from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# `ci` is derandomized so `make test` is repeatable; `nightly` runs 10x the examples.
settings.register_profile(
    "ci",
    max_examples=100,
    stateful_step_count=40,
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "nightly",
    max_examples=1000,
    stateful_step_count=80,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=50, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Hand the margins a test recorded to its report: under pytest-xdist the report is
    what reaches the controller, which writes the run's summary and margins report."""
    from tests import model_margins

    report = yield
    report.user_properties.extend(model_margins.take_pending())
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    from tests import model_margins

    if not _is_xdist_worker():
        model_margins.collect(report.user_properties)


def _is_xdist_worker() -> bool:
    return _ON_WORKER


#: whether this process is a pytest-xdist worker (set by pytest_configure; a subprocess of
#: a test that runs pytest is not one, though it inherits the worker's environment)
_ON_WORKER = False


def pytest_configure(config: pytest.Config) -> None:
    from tests import scheduling

    global _ON_WORKER
    _ON_WORKER = hasattr(config, "workerinput")
    scheduling.register(config)


def pytest_terminal_summary(terminalreporter: object) -> None:
    """List the margins of the run's model-output assertions, smallest first."""
    from tests import model_margins

    if model_margins.RECORDED:
        writer = terminalreporter  # a TerminalReporter; typed loosely to keep this import-free
        writer.section("model-output margins")  # type: ignore[attr-defined]
        for line in model_margins.summary_lines():
            writer.write_line(line)  # type: ignore[attr-defined]


def pytest_sessionfinish() -> None:
    from tests import model_margins

    if not _is_xdist_worker():  # the controller writes the report of the whole run
        model_margins.write_report()
