"""The system tools the suite installs itself: Node.js, Debian Chromium and qemu-user.

`make test` runs `make system-deps` (`tools/install_system_deps.sh`) first, so a missing
tool means the machine missed that step: the tests that need one FAIL, with the command
that fixes it, instead of skipping (a skip would let `make test` pass without the browser
checks). Genuine hardware skips (CUDA) are not tools and stay skips.

`node` is looked up the way the install script checks it: on PATH, else the Debian paths
(`/usr/bin/node` is what the `nodejs` package installs), at version 18 or later (Debian
bookworm's).
"""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tools.fake_browser import CHROMIUM

INSTALL_HINT = "run `make system-deps` as root (or `sudo bash tools/install_system_deps.sh`)"
MIN_NODE_MAJOR = 18


def _node_major(path: str) -> int | None:
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except OSError:
        return None
    match = re.match(r"v(\d+)\.", out.strip())
    return int(match.group(1)) if match else None


@functools.cache
def _find_node() -> tuple[str | None, str]:
    """(the node binary, or None and why not)."""
    candidates = [shutil.which("node"), shutil.which("nodejs"), "/usr/bin/node", "/usr/bin/nodejs"]
    seen: list[str] = []
    for path in dict.fromkeys(c for c in candidates if c):
        if not os.access(path, os.X_OK):
            continue
        major = _node_major(path)
        if major is not None and major >= MIN_NODE_MAJOR:
            return path, ""
        seen.append(f"{path} (v{major})" if major is not None else f"{path} (no version)")
    if seen:
        return None, f"Node.js >= {MIN_NODE_MAJOR} is missing, found only {', '.join(seen)}"
    return None, "Node.js (`node`) is not installed"


def node_binary() -> str:
    """The `node` to run the web tests with; fails the test when there is none."""
    path, why = _find_node()
    if path is None:
        pytest.fail(f"{why}: {INSTALL_HINT}", pytrace=False)
    return path


def chromium_binary() -> str:
    """Debian's Chromium (what Playwright launches); fails the test when it is missing."""
    if not Path(CHROMIUM).is_file() or not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"Debian chromium is not installed ({CHROMIUM}): {INSTALL_HINT}", pytrace=False)
    return CHROMIUM


def qemu_x86_64_binary() -> str:
    """qemu-user's x86-64 emulator, whose `-cpu max` has AVX2 and no AVX-512 (QEMU's TCG
    implements no AVX-512): skips off x86-64 hosts, fails the test when it is missing."""
    if platform.machine() != "x86_64":
        pytest.skip(f"emulating another x86-64 CPU needs an x86-64 host, not {platform.machine()}")
    path = shutil.which("qemu-x86_64")
    if path is None:
        pytest.fail(f"qemu-user (`qemu-x86_64`) is not installed: {INSTALL_HINT}", pytrace=False)
    return path
