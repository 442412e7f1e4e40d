"""The locks (locks/*.txt) agree with pyproject.toml, and every install uses them.

A fresh machine installs exactly what CI tested only if the locks are current and the
Makefile installs nothing else. `make lock` refreshes them (tools/lock.py).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
HINT = "run `make lock` (and commit locks/)"


def _lock_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lock_tool", ROOT / "tools" / "lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


lock = _lock_tool()
PYPROJECT = lock.load_pyproject()
SETS = lock.install_sets(PYPROJECT)
#: markers evaluated as on the machines the locks are resolved for
TARGET = {**default_environment(), "python_version": lock.PYTHON_VERSION, "sys_platform": "linux"}


def _text(name: str) -> str:
    path = SETS[name].path
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing: {HINT}"
    return str(path.read_text())


@pytest.mark.parametrize("name", sorted(SETS))
def test_each_lock_was_written_from_the_current_pyproject(name: str) -> None:
    assert lock.locked_digest(_text(name)) == lock.inputs_digest(PYPROJECT), (
        f"pyproject.toml changed since locks/{name}.txt was written: {HINT}"
    )


@pytest.mark.parametrize("name", sorted(SETS))
def test_each_lock_pins_what_its_set_asks_for_with_hashes(name: str) -> None:
    text = _text(name)
    pins = lock.locked_pins(text)
    for line in lock.direct_requirements(SETS[name], PYPROJECT):
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate(TARGET):
            continue
        key = re.sub(r"[-_.]+", "-", requirement.name).lower()
        override = {Requirement(o).name: Requirement(o) for o in SETS[name].overrides}
        requirement = override.get(requirement.name, requirement)
        assert key in pins, f"locks/{name}.txt does not pin {requirement.name}: {HINT}"
        assert requirement.specifier.contains(pins[key], prereleases=True), (
            f"locks/{name}.txt pins {key}=={pins[key]}, outside {line!r}: {HINT}"
        )
    # every pin carries its hashes (pip --require-hashes refuses a file with one missing)
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 5)[-1].strip())
    for entry in entries:
        if lock.PIN_LINE.match(entry):
            assert "--hash=sha256:" in entry, f"locks/{name}.txt: no hash for {entry!r}"


@pytest.mark.parametrize("name", sorted(n for n, s in SETS.items() if s.constrained_by))
def test_a_package_has_one_version_in_every_set_of_the_venv(name: str) -> None:
    """`make serve` and `make test` share one venv: cpu's versions are test's."""
    base = lock.locked_pins(_text(SETS[name].constrained_by))
    for package, version in lock.locked_pins(_text(name)).items():
        if package in base:
            assert base[package] == version, (name, package, version, base[package])


def test_every_pip_install_in_the_makefile_is_locked_or_the_project_itself() -> None:
    makefile = (ROOT / "Makefile").read_text()
    variables = dict(re.findall(r"^(PIP_\w+) := (.*)$", makefile, re.MULTILINE))
    assert "--require-hashes" in variables["PIP_LOCKED"]
    assert variables["PIP_PROJECT"].endswith("--no-deps --no-build-isolation -e .")
    pip_lines = [
        line.strip()
        for line in makefile.splitlines()
        if line.startswith("\t") and ("pip " in line or "$(PIP_" in line)
    ]
    assert pip_lines
    for line in pip_lines:
        locked = "$(PIP_LOCKED) -r locks/" in line or "$(PIP_PROJECT)" in line
        download = "pip download" in line and "--require-hashes" in line
        assert locked or download, f"the Makefile installs outside the locks: {line}"


def test_the_suite_runs_on_exactly_the_locked_test_set() -> None:
    """What this run tests is what a fresh machine gets from `make test`."""
    if Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        pytest.skip(f"not the project's .venv ({sys.prefix}): only `make test` is compared")
    differ = {}
    for package, version in lock.locked_pins(_text("test")).items():
        try:
            installed = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed != version:
            differ[package] = (version, installed)
    assert differ == {}, (
        f"installed versions differ from locks/test.txt (locked, installed): {differ}; "
        "run `make install-test`"
    )
