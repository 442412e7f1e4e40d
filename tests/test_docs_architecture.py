"""docs/architecture.md names every package and every module of core/, runtime/ and the
client side.

The rule, strict so that a new package or module cannot be left out by accident:

- every package, a directory holding an `__init__.py` anywhere under `spec/`, `core/`,
  `backends/`, `runtime/`, `transport/` or `clients/` (those six included), is named by
  its path from the repository root with a trailing slash, in backticks:
  `` `backends/joyai/` ``;
- every module directly in `core/`, `core/client_protocol/`, `runtime/` or `clients/`
  (their `__init__.py` aside) is named by its path from the repository root, in
  backticks: `` `core/turn_taking.py` ``;
- and every module of those folders the document names exists, so a module that was
  renamed or removed does not live on in it.
"""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs/architecture.md"
PACKAGE_ROOTS = ("spec", "core", "backends", "runtime", "transport", "clients")
MODULE_FOLDERS = ("core", "core/client_protocol", "runtime", "clients")


def _packages() -> list[str]:
    found = []
    for top in PACKAGE_ROOTS:
        for init in (ROOT / top).rglob("__init__.py"):
            folder = init.parent.relative_to(ROOT)
            if not any(part.startswith((".", "__")) for part in folder.parts):
                found.append(f"{folder.as_posix()}/")
    return sorted(found)


def _modules() -> list[str]:
    return sorted(
        f"{folder}/{path.name}"
        for folder in MODULE_FOLDERS
        for path in (ROOT / folder).glob("*.py")
        if path.name != "__init__.py"
    )


def test_the_walk_finds_what_it_must() -> None:
    packages, modules = _packages(), _modules()
    assert {
        "spec/",
        "core/",
        "core/statemachines/",
        "core/client_protocol/",
        "backends/joyai/",
        "transport/",
        "clients/",
        "clients/loadgen/",
    } <= set(packages)
    assert {
        "core/session.py",
        "core/client_protocol/protocol.py",
        "runtime/host.py",
        "clients/duplex_client.py",
    } <= set(modules)


def test_architecture_doc_names_every_package_and_core_runtime_and_client_module() -> None:
    text = DOC.read_text()
    missing = [name for name in [*_packages(), *_modules()] if f"`{name}`" not in text]
    assert not missing, (
        "docs/architecture.md does not name these (in backticks, by their path from the "
        f"repository root; packages with a trailing slash): {missing}"
    )


def test_architecture_doc_names_no_core_runtime_or_client_module_that_is_gone() -> None:
    text = DOC.read_text()
    folders = "|".join(sorted(MODULE_FOLDERS, key=len, reverse=True))
    named = set(re.findall(rf"`((?:{folders})/[A-Za-z_][A-Za-z0-9_]*\.py)`", text))
    gone = sorted(name for name in named if not (ROOT / name).is_file())
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"
