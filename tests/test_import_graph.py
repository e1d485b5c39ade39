"""Imports inside oneiro_hf run one way: no module imports (at the top, inside a function, or under
`if TYPE_CHECKING:`) a module that imports it back, directly or around a cycle.

`from pkg import name` reads pkg's namespace, so it counts as an import of the package pkg (its __init__ must
have run) and, when pkg.name is a module, of that module too: a package's __init__ that imports one of its
modules which imports from the package is a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "oneiro_hf"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str], package: str | None = None) -> set[str]:
    """The oneiro_hf modules `path` imports, anywhere in it (TYPE_CHECKING blocks and functions included);
    `from pkg import name` counts as pkg, and as pkg.name too when that is a module."""
    own = module_name(path) if package is None else f"{package}.{path.stem}"
    if package is None:
        package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            found.add(source)
            found.update(f"{source}.{alias.name}" for alias in node.names)
    return {m for m in found if m in modules and m != own}


def import_graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: imported_modules(path, set(files)) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_lazy_relative_and_type_checking_imports(tmp_path):
    graph = import_graph()
    assert "oneiro_hf.bench.answers" in graph["oneiro_hf.bench.merge"]
    assert "oneiro_hf.drafting.latency" in graph["oneiro_hf.bench.breakdown"]  # imported inside a function
    assert {"oneiro_hf.bench", "oneiro_hf.bench.runner"} <= graph["oneiro_hf.bench.cli"]  # `from . import runner`
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .x import A\n"
        "def f():\n    from . import y\n"
    )
    found = imported_modules(source.resolve(), {"oneiro_hf", "oneiro_hf.x", "oneiro_hf.y"}, package="oneiro_hf")
    assert found == {"oneiro_hf", "oneiro_hf.x", "oneiro_hf.y"}


def test_no_import_cycles_inside_the_package():
    found = cycles(import_graph())
    assert not found, f"import cycles: {found}"


def test_generate_path_imports_run_one_way():
    graph = import_graph()
    assert "oneiro_hf.generation.hook" in graph["oneiro_hf.generation.binding"]  # binding installs the hook
    assert "oneiro_hf.generation.candidate_generator" in graph["oneiro_hf.generation.hook"]
    assert "oneiro_hf.modeling_oneiro" not in graph["oneiro_hf.generation.hook"]  # a drafter is known by a class flag
    assert not {"oneiro_hf.modeling_oneiro", "oneiro_hf.generation.hook"} & graph["oneiro_hf.generation.candidate_generator"]
    for user in ("oneiro_hf.storage.cards", "oneiro_hf.bench.plan", "oneiro_hf.training.features"):
        assert "oneiro_hf.targets" in graph[user] and "oneiro_hf.modeling_oneiro" not in graph[user], user


def test_hub_code_never_imports_the_modeling_code():
    graph = import_graph()
    assert "oneiro_hf.storage.hub" in graph["oneiro_hf.modeling_oneiro"]  # push_to_hub publishes through the Hub code
    assert "oneiro_hf.storage.cards" in graph["oneiro_hf.storage.hub"]
    for module in ("oneiro_hf.storage.hub", "oneiro_hf.storage.cards"):
        assert "oneiro_hf.modeling_oneiro" not in graph[module], module
    assert "oneiro_hf.bench.cli" not in graph["oneiro_hf.bench"]


# The rooms of docs/design.md's map, bottom to top: a module imports from its own room or a room below it.
# The base is the package root's modules (settings, targets, configuration, chat, compat, extras, version, moved).
ROOM_LEVELS = {
    "storage": 1,
    "kernels": 2,
    "drafting": 3,
    "generation": 4,
    "modeling_oneiro": 5,
    "loading": 5,
    "metrics": 6,  # the benchmark's quality metrics
    "bench": 7,
    "training": 7,
    "serving": 7,
}
TOP_ROOMS = {"bench", "training", "serving"}  # tools: each uses the rooms below, not one another
# imports against the map's direction, each with the reason it is there
AGAINST_THE_MAP = {
    ("oneiro_hf.targets", "oneiro_hf.storage.identity"): "what a target is includes its weights' fingerprint",
    ("oneiro_hf.training.prompts.mix", "oneiro_hf.bench.answers"):
        "training prompts leave out the questions the benchmark evaluates on (the variable that names them)",
}


def room_of(module: str) -> tuple[str, int]:
    parts = module.split(".")
    if len(parts) == 1:
        return "oneiro_hf", 6  # the package's __init__: the public names, from every room below the tools
    return parts[1], ROOM_LEVELS.get(parts[1], 0)


def test_imports_follow_the_map_of_rooms():
    against = set()
    for module, imported in import_graph().items():
        room, level = room_of(module)
        for other in imported:
            other_room, other_level = room_of(other)
            if other_level > level or (room != other_room and room in TOP_ROOMS and other_room in TOP_ROOMS):
                against.add((module, other))
    unexplained = sorted(against - set(AGAINST_THE_MAP))
    assert not unexplained, f"imports against docs/design.md's map, unexplained (add a reason or move code): {unexplained}"
    stale = sorted(set(AGAINST_THE_MAP) - against)
    assert not stale, f"AGAINST_THE_MAP lists imports that no longer exist: {stale}"


def test_the_package_root_reads_as_a_table_of_contents():
    modules = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(modules) <= 12, f"the package root has {len(modules)} modules; a new one belongs in a room: {modules}"
