"""A machine's bookkeeping is changed only by the machine: outside `core/statemachines/`,
no code assigns, deletes or mutates a `Response` field (it calls a `Response` method)."""

from __future__ import annotations

import ast
from pathlib import Path

from core.statemachines.response import Response

ROOT = Path(__file__).resolve().parents[2]
MUTATORS = {"append", "add", "clear", "discard", "extend", "pop", "popitem", "remove", "update"}
SLOTS = set(Response.__slots__)
OWN = {"self", "cls"}


def _foreign_field(node: ast.AST) -> str | None:
    """`x.<Response field>` where `x` is not `self`: the field name, else None."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if (
        isinstance(node, ast.Attribute)
        and node.attr in SLOTS
        and not (isinstance(node.value, ast.Name) and node.value.id in OWN)
    ):
        return node.attr
    return None


def _violations(source: str) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in MUTATORS
        ):
            targets = [node.func.value]
        for target in targets:
            for leaf in ast.walk(target) if isinstance(target, ast.Tuple) else [target]:
                name = _foreign_field(leaf)
                if name is not None and name not in {"item", "state", "playback"}:
                    found.append((node.lineno, name))
    return found


def test_no_response_field_is_changed_outside_the_statemachines() -> None:
    offenders = []
    for path in sorted((ROOT / "core").rglob("*.py")):
        source = path.read_text()
        # the modules that handle responses (the client side has machines of its own)
        if "statemachines" in path.parts or "statemachines.response import" not in source:
            continue
        for line, name in _violations(source):
            offenders.append(f"{path.relative_to(ROOT)}:{line}: .{name}")
    assert not offenders, "Response fields changed from outside:\n" + "\n".join(offenders)


def test_the_ownership_check_finds_a_foreign_assignment() -> None:
    source = "def f(r):\n    r.pending_text = ''\n    del r.open_requests['x']\n"
    assert [name for _, name in _violations(source)] == ["pending_text", "open_requests"]
