"""Servers started by tests do not shed load unless the test is about shedding.

The suite must pass on a loaded 2-core machine, where the event loop of a test server
really does wake late for seconds at a time; a server that then refuses new sessions
(resource_exhausted, 1013) is right, and its own tests prove it (tests/core/test_admission.py,
tests/transport/test_end_to_end.py), but every other test wants its sessions admitted.
`without_shedding` is tools/local_server.py's, which the measurement tools share.
"""

from __future__ import annotations

from pathlib import Path

from tools.local_server import without_shedding

__all__ = ["SHEDDING_OFF_TOML", "config_args_without_shedding", "without_shedding"]

SHEDDING_OFF_TOML = "shed_loop_lag_ms = 0\n"


def config_args_without_shedding(args: list[str], folder: Path) -> list[str]:
    """`joyduplex serve` arguments whose `--config` (added when absent) switches shedding
    off in its `[limits]` table."""
    args = list(args)
    text = ""
    if "--config" in args:
        i = args.index("--config")
        text = Path(args[i + 1]).read_text()
        del args[i : i + 2]
    if "[limits]" in text:
        text = text.replace("[limits]", "[limits]\n" + SHEDDING_OFF_TOML, 1)
    else:
        text += "\n[limits]\n" + SHEDDING_OFF_TOML
    path = folder / "joyduplex-test.toml"
    path.write_text(text)
    return [*args, "--config", str(path)]
