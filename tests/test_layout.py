"""The import graph: rooms depend one way, and no module imports itself back.

Every import is counted, those inside functions too (a late import is still a
dependency). Read from the source, so nothing is imported to check it.
"""

from __future__ import annotations

import ast
import graphlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("worker", "breakers", "budgets", "rediskit")
# worker/errors.py and the types and settings packages: every room may import them.
FOUNDATION_ROOTS = ("worker.types", "worker.errors", "worker.settings")

# What each room may import besides itself, the foundation and `rediskit` (the Redis kit
# below every room, `BELOW_ALL`): surfaces on top, then fleet, turn, guard and adapters,
# observability at the bottom.
MAY_IMPORT: dict[str, set[str]] = {
    "worker": {"worker.turn", "worker.guard", "worker.adapters"},  # the public surface
    "worker.cli": {"worker.console", "worker.demo", "worker.simulator", "worker.fleet",
                   "worker.turn", "worker.guard", "worker.adapters", "worker.observability",
                   "breakers", "budgets"},
    "worker.demo": {"worker.console", "worker.simulator", "worker.fleet", "worker.turn",
                    "worker.guard", "worker.adapters", "worker.observability", "breakers",
                    "budgets"},
    "worker.frameworks": {"worker.fleet", "worker.turn", "worker.guard", "worker.adapters",
                          "worker.observability"},
    "worker.console": {"worker.fleet", "worker.turn", "worker.guard", "worker.adapters",
                       "worker.observability", "breakers", "budgets"},
    "worker.fleet": {"worker.turn", "worker.guard", "worker.adapters",
                     "worker.observability", "breakers", "budgets"},
    "worker.turn": {"worker.guard", "worker.adapters", "worker.observability", "budgets"},
    "worker.guard": {"worker.observability", "breakers", "budgets"},
    "worker.adapters": {"worker.observability"},
    "worker.observability": set(),
    "worker.simulator": set(),
    "worker.foundation": {"breakers", "budgets"},
    "breakers": set(),
    "budgets": {"breakers"},
    "rediskit": set(),
}  # fmt: skip
BELOW_ALL = "rediskit"


def _modules() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            yield ".".join(parts), path


def _imports(name: str, path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                # `from worker.cli import fleet` imports the module worker.cli.fleet
                submodule = f"{node.module}.{alias.name}"
                found.add(submodule if submodule in GRAPH_NAMES else node.module)
    return {m for m in found if m.split(".")[0] in PACKAGES and m in GRAPH_NAMES}


MODULES = dict(_modules())
GRAPH_NAMES = set(MODULES)
FOUNDATION = {m for m in MODULES if any(m == r or m.startswith(f"{r}.") for r in FOUNDATION_ROOTS)}
GRAPH = {name: _imports(name, path) - {name} for name, path in MODULES.items()}


def room(module: str) -> str:
    """The room a module belongs to: its package for worker's rooms, else its top package."""
    if module in FOUNDATION:
        return "worker.foundation"
    if module == "worker":
        return "worker"
    parts = module.split(".")
    if parts[0] == "worker" and len(parts) > 1 and f"worker.{parts[1]}" in MAY_IMPORT:
        return f"worker.{parts[1]}"
    return parts[0]


def test_every_module_is_in_a_room() -> None:
    unplaced = [m for m in MODULES if room(m) not in MAY_IMPORT]
    assert unplaced == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down(module: str) -> None:
    own = room(module)
    allowed = MAY_IMPORT[own] | {own, "worker.foundation", BELOW_ALL}
    if own in ("breakers", "budgets", BELOW_ALL):
        allowed -= {"worker.foundation"}
    if own == BELOW_ALL:
        allowed = {own}
    wrong = sorted(m for m in GRAPH[module] if room(m) not in allowed)
    assert wrong == [], f"{module} ({own}) may not import {wrong}"


def test_the_foundation_imports_only_itself() -> None:
    for module in FOUNDATION:
        assert {m for m in GRAPH[module] if m.startswith("worker")} <= FOUNDATION


def test_the_redis_kit_is_below_every_room() -> None:
    """`breakers`, `budgets` and `worker` import `rediskit`; it imports none of them."""
    kit = {m for m in MODULES if room(m) == BELOW_ALL}
    assert kit
    assert all(GRAPH[m] <= kit for m in kit)
    users = {room(m).split(".")[0] for m in MODULES for i in GRAPH[m] if i in kit}
    assert {"breakers", "budgets", "worker"} <= users


def test_no_import_circles() -> None:
    sorter = graphlib.TopologicalSorter(GRAPH)
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        pytest.fail(f"import circle: {' -> '.join(exc.args[1])}")


def test_a_circle_would_be_found() -> None:
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter({"a": {"b"}, "b": {"c"}, "c": {"a"}}).prepare()
