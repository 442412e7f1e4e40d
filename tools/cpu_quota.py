"""Run a process under a CPU quota: a child cgroup whose CFS bandwidth limit is a fraction
of one core, so a measurement can show what a slower machine does; and count the CPU a
process tree used (`tree_cpu_s`, for the measurements that report a server's cost).

Both cgroup interfaces are handled: v2 (`cpu.max` in a group of the unified hierarchy, when
its `cpu` controller is available) and v1 (`cpu.cfs_quota_us` / `cpu.cfs_period_us` in the
`cpu` hierarchy). Nothing is faked: when neither can be set up (no writable cgroup with a
`cpu` controller, not root), `QuotaUnavailable` says what was tried and why it failed.

    with CpuQuota(0.33) as quota:
        process = subprocess.Popen(...)
        quota.add(process.pid)  # before it starts threads or worker processes
        ...
        print(quota.stats())  # periods, throttled periods, throttled seconds
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

PERIOD_US = 100_000


class QuotaUnavailable(RuntimeError):
    """No cgroup with a CPU controller could be set up here."""


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, filesystem type, super options) of every cgroup mount."""
    found: list[tuple[str, str, set[str]]] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((fields[4], tail[0], set(tail[2].split(","))))
    return found


def _own_groups() -> dict[str, str]:
    """Controller (or "" for the v2 hierarchy) -> this process's group path in it."""
    groups: dict[str, str] = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            groups[name] = path
    return groups


class CpuQuota:
    """A child cgroup limited to `cores` of CPU time (0.33: 33 ms per 100 ms period)."""

    def __init__(self, cores: float, name: str | None = None) -> None:
        if not 0.01 <= cores <= 64:
            raise ValueError(f"a CPU quota of {cores} cores is out of range")
        self.cores = cores
        self.name = name or f"joyduplex-quota-{os.getpid()}"
        self.path: Path | None = None
        self.version = 0

    def __enter__(self) -> CpuQuota:
        self.path, self.version = self._create()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _create(self) -> tuple[Path, int]:
        quota_us = max(1000, round(self.cores * PERIOD_US))
        tried: list[str] = []
        groups = _own_groups()
        mounts = _mounts()
        for mount, kind, _ in mounts:
            if kind != "cgroup2":
                continue
            parent = Path(mount) / groups.get("", "/").lstrip("/")
            try:
                if "cpu" not in (parent / "cgroup.controllers").read_text().split():
                    tried.append(f"cgroup v2 at {parent}: no cpu controller")
                    continue
                if "cpu" not in (parent / "cgroup.subtree_control").read_text().split():
                    (parent / "cgroup.subtree_control").write_text("+cpu")
                child = parent / self.name
                child.mkdir(exist_ok=True)
                (child / "cpu.max").write_text(f"{quota_us} {PERIOD_US}")
                return child, 2
            except OSError as error:
                tried.append(f"cgroup v2 at {parent}: {error}")
        for mount, kind, options in mounts:
            if kind != "cgroup" or "cpu" not in options:
                continue
            parent = Path(mount) / groups.get("cpu", "/").lstrip("/")
            child = parent / self.name
            try:
                child.mkdir(exist_ok=True)
                (child / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (child / "cpu.cfs_quota_us").write_text(str(quota_us))
                return child, 1
            except OSError as error:
                tried.append(f"cgroup v1 at {parent}: {error}")
                _remove(child)
        if not tried:
            tried.append("no cgroup filesystem with a cpu controller is mounted")
        raise QuotaUnavailable(
            f"cannot run under a CPU quota of {self.cores} cores here ("
            + "; ".join(tried)
            + "); where systemd is PID 1, `systemd-run --scope -p CPUQuota=33% ...` does it"
        )

    def add(self, pid: int) -> None:
        """Move `pid` (all its threads; processes it forks later follow) into the group,
        and check that it is there."""
        assert self.path is not None, "use CpuQuota as a context manager"
        try:
            (self.path / "cgroup.procs").write_text(str(pid))
        except OSError as error:
            raise QuotaUnavailable(f"cannot move pid {pid} into {self.path}: {error}") from error
        members = (self.path / "cgroup.procs").read_text().split()
        if str(pid) not in members:
            raise QuotaUnavailable(f"pid {pid} is not in {self.path} after the move")

    def stats(self) -> dict[str, Any]:
        """The group's throttling so far: periods, throttled periods, throttled seconds."""
        assert self.path is not None
        fields = dict(
            line.split() for line in (self.path / "cpu.stat").read_text().splitlines() if line
        )
        throttled_s = (
            int(fields.get("throttled_usec", 0)) / 1e6
            if self.version == 2
            else int(fields.get("throttled_time", 0)) / 1e9
        )
        return {
            "cores": self.cores,
            "cgroup": str(self.path),
            "cgroup_version": self.version,
            "periods": int(fields.get("nr_periods", 0)),
            "throttled_periods": int(fields.get("nr_throttled", 0)),
            "throttled_s": round(throttled_s, 2),
        }

    def close(self, wait_s: float = 30.0) -> None:
        """Remove the group, waiting up to `wait_s` for the processes in it to exit (a
        server's workers may outlive it by a moment, slowly under a small quota)."""
        if self.path is None:
            return
        deadline = time.monotonic() + wait_s
        while not _remove(self.path) and time.monotonic() < deadline:
            time.sleep(0.2)
        if self.path.exists():
            left = (self.path / "cgroup.procs").read_text().split()
            print(f"could not remove {self.path} (pids left in it: {left})", file=sys.stderr)
        self.path = None


def _remove(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by `pid` and every live process under it."""
    parents: dict[int, int] = {}
    used: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        used[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += used.get(current, 0.0)
        todo += [child for child, parent in parents.items() if parent == current]
    return total
