"""The import direction of docs/architecture.md section 2, enforced by import-linter."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    exe = shutil.which("lint-imports", path=str(pathlib.Path(sys.executable).parent))
    assert exe, "import-linter is not installed"
    result = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "broken" not in result.stdout.lower().replace("0 broken", "")


def _circles(graph: object, modules: list[str]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in sorted(graph.find_modules_directly_imported_by(module)):  # type: ignore[attr-defined]
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in modules:
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_itself_through_others() -> None:
    """No import circle among the project's modules, type-checking imports included: a
    circle ties two floors into one and makes the import order matter."""
    import grimp  # import-linter's graph builder

    graph = grimp.build_graph("spec", "core", "backends", "runtime", "transport", "clients")
    limit = sys.getrecursionlimit()
    # Tarjan's walk recurses once per import on a path; the limit is restored after, as
    # other tests (the codec's nesting refusal) depend on the default one
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        circles = _circles(graph, sorted(graph.modules))
    finally:
        sys.setrecursionlimit(limit)
    assert circles == []


#: the most lines a module of the house's own packages may have: past it a module holds
#: more than one responsibility, and a reader scrolls instead of reading
MAX_MODULE_LINES = 550
MODULE_ROOTS = ("spec", "core", "runtime", "transport", "clients")


def _module_lines() -> dict[str, int]:
    return {
        path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
        for top in MODULE_ROOTS
        for path in (ROOT / top).rglob("*.py")
        if "__pycache__" not in path.parts
    }


def test_no_module_is_over_550_lines() -> None:
    lines = _module_lines()
    over = {name: n for name, n in sorted(lines.items()) if n > MAX_MODULE_LINES}
    assert not over, f"split these by responsibility (at most {MAX_MODULE_LINES} lines): {over}"
