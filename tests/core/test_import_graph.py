"""The house has no import circles: every import of the package, including those inside functions, read from
the code. Rooms are the top-level modules of `ragzoo` and its sub-packages (`ragzoo.retrieval`,
`ragzoo.programs`, ...); a circle between two rooms means neither can be understood or changed alone."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# source folder -> import name (pyproject's package-dir mapping)
SOURCES = {"ragzoo": "ragzoo", "programs": "ragzoo.programs", "optimizers": "ragzoo.optimizers",
           "metrics": "ragzoo.metrics", "signatures": "ragzoo.signatures"}
PACKAGES = {"ragzoo.retrieval", "ragzoo.data", "ragzoo.commands", *list(SOURCES.values())[1:]}


def _modules() -> dict[str, Path]:
    found = {}
    for folder, name in SOURCES.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([name, *parts])] = path
    return found


def _room(module: str) -> str:
    for package in sorted(PACKAGES, key=len, reverse=True):
        if module == package or module.startswith(package + "."):
            return package
    return ".".join(module.split(".")[:2])


def _imports(module: str, path: Path) -> set[str]:
    targets = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    return {target for target in targets if target == "ragzoo" or target.startswith("ragzoo.")}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    edges: dict[str, set[str]] = {}
    for module, path in modules.items():
        for target in _imports(module, path):
            while target not in modules and "." in target:  # `from ragzoo.x import name`: the module is ragzoo.x
                target = target.rpartition(".")[0]
            if target in modules and target != "ragzoo":
                source_room, target_room = _room(module), _room(target)
                if source_room != target_room:
                    edges.setdefault(source_room, set()).add(target_room)
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one room (Tarjan)."""
    index, low, stack, on_stack, result, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    for node in list(edges):
        if node not in index:
            visit(node)
    return result


def test_the_reader_finds_a_circle_when_there_is_one():
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_circle_between_rooms():
    edges = _graph()
    assert "ragzoo.optimizers" in edges.get("ragzoo.artifacts", set())  # the reader sees lazy imports
    assert _circles(edges) == []


def test_declarative_and_core_rooms_do_not_reach_up():
    edges = _graph()
    assert "ragzoo.lm" not in edges.get("ragzoo.signatures", set())
    assert not edges.get("ragzoo.runs", set()) & {"ragzoo.optimizers", "ragzoo.artifacts"}
    assert "ragzoo.retrieval" not in edges.get("ragzoo.data", set())
