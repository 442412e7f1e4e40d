from __future__ import annotations

import os

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

    model_margins.write_report()
