"""No import cycles between loopwatch's modules. Every import counts: the ones inside a
function and under ``TYPE_CHECKING`` too. Such an import cannot fail at import time,
but two modules that each need the other are one knot in the design all the same; the
way out is to move what both need to a module of its own, not to import it lazily."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "loopwatch"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def resolve(current: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    if node.level == 0:
        base = node.module or ""
    else:
        pkg = current.split(".") if is_package else current.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([node.module] if node.module else []))
    if not base.startswith("loopwatch"):
        return []
    # "from .x import y": y may be a submodule of x, or a name in x. "from . import
    # sub" names a submodule: it needs the package to exist, not its __init__'s names.
    subs = [f"{base}.{a.name}" for a in node.names]
    if node.module is None and node.level > 0:
        return subs
    return [base, *subs]


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in SRC.rglob("*.py")}
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):  # in functions and under TYPE_CHECKING too
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                targets = resolve(name, path.name == "__init__.py", node)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.startswith("loopwatch")]
            for t in targets:
                if t in modules and t != name:
                    edges[name].add(t)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for n in sorted(edges[m]):
            if state.get(n) == 1:
                found.append([*stack[stack.index(n) :], n])
            elif n not in state:
                visit(n)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    return found


def test_the_graph_sees_imports() -> None:
    edges = graph()
    assert "loopwatch.fingerprints" in edges["loopwatch.text"]
    assert "loopwatch.fingerprints" in edges["loopwatch.events"]
    assert "loopwatch.detectors.base" in edges["loopwatch.detectors.futility"]
    assert "loopwatch.hooks.commands" in edges["loopwatch.cli"]  # inside a function
    assert "loopwatch.findings" in edges["loopwatch.errors"]  # under TYPE_CHECKING


def test_no_detector_imports_another() -> None:
    edges = graph()
    shared = {"loopwatch.detectors.base", "loopwatch.detectors"}
    for m, targets in edges.items():
        if m.startswith("loopwatch.detectors.") and m != "loopwatch.detectors.base":
            others = {t for t in targets if t.startswith("loopwatch.detectors")} - shared
            assert not others, f"{m} imports {sorted(others)}"


def test_no_import_cycles() -> None:
    found = cycles(graph())
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
