"""Lock every install set of pyproject.toml (`make lock`, `make lock-upgrade`).

Each `[tool.joyduplex.locks.<name>]` table is resolved with uv into `locks/<name>.txt`: exact
versions with the SHA-256 of every file PyPI has for them, for CPython 3.11 on Linux. The
Makefile installs only from these files, with `pip install --require-hashes --no-deps`, so a
fresh machine installs exactly what CI tested, whatever PyPI holds that day.

Each file's header records a digest of the inputs it was made from (the project's
dependencies, extras, groups, build requirements and the set tables). tests/test_locks.py
recomputes it: a change to pyproject.toml without `make lock` fails the suite.

`make lock` keeps every pin that still satisfies the inputs (uv prefers the versions of the
existing file); `make lock-upgrade` takes the newest releases. Run it with the network on;
nothing else needs uv.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
LOCKS = ROOT / "locks"
PYTHON_VERSION = "3.11"
PLATFORM = "x86_64-unknown-linux-gnu"
DIGEST_LINE = re.compile(r"^# inputs sha256:([0-9a-f]{64})$", re.MULTILINE)
PIN_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)={2,3}([^ ;\\]+)", re.MULTILINE)


@dataclass(frozen=True)
class InstallSet:
    """One `[tool.joyduplex.locks.<name>]` table: what a venv of that kind installs."""

    name: str
    purpose: str
    project: bool = False  #: the project's own `dependencies`
    extras: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()
    build_system: bool = False  #: `[build-system] requires`
    overrides: tuple[str, ...] = ()  #: replace what the other inputs ask for
    omit: tuple[str, ...] = ()  #: resolved as dependencies but never installed
    no_deps: bool = False  #: only the named requirements, without their dependencies
    constrained_by: str | None = None  #: shares that set's versions
    #: uv's --python-platform for this set alone, where a wheel needs a newer glibc than
    #: PLATFORM's (moonshine-voice: manylinux_2_34; Debian 12 has glibc 2.36)
    platform: str | None = None

    @property
    def path(self) -> Path:
        return LOCKS / f"{self.name}.txt"


def load_pyproject(path: Path = PYPROJECT) -> dict[str, Any]:
    with path.open("rb") as f:
        return tomllib.load(f)


def install_sets(pyproject: dict[str, Any]) -> dict[str, InstallSet]:
    sets: dict[str, InstallSet] = {}
    for name, table in pyproject["tool"]["joyduplex"]["locks"].items():
        fields = {k: tuple(v) if isinstance(v, list) else v for k, v in table.items()}
        sets[name] = InstallSet(name=name, **fields)
    return sets


def inputs_digest(pyproject: dict[str, Any]) -> str:
    """SHA-256 of everything a lock is made from, independent of formatting and comments."""
    project = pyproject["project"]
    inputs = {
        "dependencies": project.get("dependencies", []),
        "optional-dependencies": project.get("optional-dependencies", {}),
        "dependency-groups": pyproject.get("dependency-groups", {}),
        "build-system": pyproject["build-system"]["requires"],
        "locks": pyproject["tool"]["joyduplex"]["locks"],
        "target": [PYTHON_VERSION, PLATFORM],
    }
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def direct_requirements(install_set: InstallSet, pyproject: dict[str, Any]) -> list[str]:
    """The requirement strings a set names itself (not what they pull in)."""
    project = pyproject["project"]
    wanted: list[str] = []
    if install_set.project:
        wanted += project.get("dependencies", [])
        for extra in install_set.extras:
            wanted += project["optional-dependencies"][extra]
    for group in install_set.groups:
        wanted += pyproject["dependency-groups"][group]
    if install_set.build_system:
        wanted += pyproject["build-system"]["requires"]
    wanted += install_set.requirements
    return wanted


def locked_pins(text: str) -> dict[str, str]:
    """{normalized name: version} of a lock file's text."""
    return {_normalize(m.group(1)): m.group(2) for m in PIN_LINE.finditer(text)}


def locked_digest(text: str) -> str | None:
    match = DIGEST_LINE.search(text)
    return match.group(1) if match else None


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if found is None:
        raise SystemExit("uv is missing: `make lock` installs it (the `lock` dependency group)")
    return found


def _compile(install_set: InstallSet, digest: str, *, upgrade: bool, work: Path) -> None:
    source = work / f"{install_set.name}.in"
    source.write_text("".join(f"{r}\n" for r in install_set.requirements))
    args = [_uv(), "pip", "compile", "--quiet", "--no-header", "--generate-hashes"]
    platform = install_set.platform or PLATFORM
    args += ["--python-version", PYTHON_VERSION, "--python-platform", platform]
    args += ["--output-file", str(install_set.path), source.name]
    if install_set.project:
        args.append(str(PYPROJECT))
    args += [a for extra in install_set.extras for a in ("--extra", extra)]
    args += [a for group in install_set.groups for a in ("--group", f"{PYPROJECT}:{group}")]
    if install_set.build_system:
        build = work / f"{install_set.name}.build.in"
        build.write_text("".join(f"{r}\n" for r in load_pyproject()["build-system"]["requires"]))
        args.append(build.name)
    if install_set.overrides:
        overrides = work / f"{install_set.name}.overrides.txt"
        overrides.write_text("".join(f"{r}\n" for r in install_set.overrides))
        args += ["--overrides", overrides.name]
    args += [a for package in install_set.omit for a in ("--no-emit-package", package)]
    if install_set.no_deps:
        args.append("--no-deps")
    if install_set.constrained_by:
        args += ["--constraint", str(LOCKS / f"{install_set.constrained_by}.txt")]
    if upgrade:
        args.append("--upgrade")
    subprocess.run(args, cwd=work, check=True)
    body = install_set.path.read_text()
    # A local build with a label (the disk's torch 2.13.0+cpu) satisfies `==2.13.0`; `===`
    # takes only the release itself, whose hashes are the ones written here.
    for requirement in install_set.overrides:
        name, _, version = requirement.partition("==")
        pin = re.compile(rf"^{re.escape(name)}=={re.escape(version)}(?= )", re.MULTILINE)
        body = pin.sub(f"{name}==={version}", body)
    header = (
        f"# locks/{install_set.name}.txt: {install_set.purpose}\n"
        "# Written by `make lock` (tools/lock.py) from pyproject.toml: do not edit.\n"
        f"# CPython {PYTHON_VERSION}, {platform}; install with\n"
        f"#   pip install --require-hashes --no-deps -r locks/{install_set.name}.txt\n"
        f"# inputs sha256:{digest}\n"
    )
    install_set.path.write_text(header + body)


def _order(sets: dict[str, InstallSet]) -> list[InstallSet]:
    """Each set after the one that constrains it."""
    ordered: list[InstallSet] = []
    while len(ordered) < len(sets):
        for install_set in sets.values():
            ready = install_set.constrained_by is None or any(
                s.name == install_set.constrained_by for s in ordered
            )
            if ready and install_set not in ordered:
                ordered.append(install_set)
    return ordered


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upgrade", action="store_true", help="take the newest releases")
    args = parser.parse_args(argv)
    pyproject = load_pyproject()
    digest = inputs_digest(pyproject)
    LOCKS.mkdir(exist_ok=True)
    sets = install_sets(pyproject)
    with tempfile.TemporaryDirectory() as work:
        for install_set in _order(sets):
            _compile(install_set, digest, upgrade=args.upgrade, work=Path(work))
            pins = locked_pins(install_set.path.read_text())
            print(f"locks/{install_set.name}.txt: {len(pins)} packages")
    names = {f"{name}.txt" for name in sets}
    for stale in sorted(p for p in LOCKS.glob("*.txt") if p.name not in names):
        stale.unlink()
        print(f"removed {stale.relative_to(ROOT)} (no such set)")


if __name__ == "__main__":
    main()
