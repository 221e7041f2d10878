"""The import layers of posttrain (CONTRIBUTING.md, "Layout and layers"), checked statically.

Every `import` of a posttrain module in posttrain/, at module level or inside a function, is read
from the source (no module is imported), and:

- a module imports only from its own layer or the layers before it;
- no two modules import each other, directly or round a longer circle;
- no two top-level packages import each other (the arrows between packages form a chain).

`from posttrain.pkg import sub` counts as an import of the module `posttrain.pkg.sub` when `sub` is
one, else of `posttrain.pkg` (its `__init__`). The package `__init__` that Python runs first for any
submodule is not counted: it is there for every import alike.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "posttrain"

# Top-level modules and packages of posttrain, by layer: each imports only from its own layer or
# the ones above it in this list.
LAYERS: list[tuple[str, set[str]]] = [
    ("core", {"", "errors", "files", "records", "config", "algorithms"}),
    ("components", {"models", "data", "tasks", "rewards", "envs", "rollout", "cluster", "optim", "checkpoint", "buffer",
                    "tracking", "report", "runlock", "runtime", "sandbox", "tools", "agents"}),
    ("roles", {"workers"}),
    ("drivers", {"trainer"}),
    ("command line", {"cli", "__main__"}),
]
LAYER_OF = {unit: i for i, (_, units) in enumerate(LAYERS) for unit in units}


def module_name(path: Path) -> str:
    parts = ["posttrain", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit(module: str) -> str:
    """The top-level module or package of `posttrain.<unit>...` ("" for posttrain itself)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def import_graph() -> dict[str, dict[str, int]]:
    """{module: {imported posttrain module: line of the first such import}} over all of posttrain/."""
    files = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}
    graph: dict[str, dict[str, int]] = {}
    for module, path in files.items():
        is_package = path.name == "__init__.py"
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the package holding this module
                    base = module.split(".")[: len(module.split(".")) - node.level + is_package]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    targets.append(sub if sub in files else source)
            for target in targets:
                if target in files and target != module:
                    edges.setdefault(target, node.lineno)
        graph[module] = edges
    return graph


def cycles(graph: dict[str, set[str]] | dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
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


def test_every_top_level_module_and_package_has_a_layer():
    units = {unit(m) for m in import_graph()}
    assert units - set(LAYER_OF) == set(), "add the new module or package to LAYERS (and CONTRIBUTING.md)"


def test_no_module_imports_from_a_later_layer():
    upward = [
        f"{module} (line {line}, {LAYERS[LAYER_OF[unit(module)]][0]}) imports {target} ({LAYERS[LAYER_OF[unit(target)]][0]})"
        for module, edges in import_graph().items()
        for target, line in edges.items()
        if LAYER_OF.get(unit(target), -1) > LAYER_OF.get(unit(module), len(LAYERS))
    ]
    assert upward == []


def test_no_import_cycles_between_modules():
    graph = import_graph()
    circles = [
        [f"{a} -> {b} (line {graph[a][b]})" for a in component for b in graph[a] if b in component]
        for component in cycles(graph)
    ]
    assert circles == []


def test_no_import_cycles_between_packages():
    packages: dict[str, set[str]] = {}
    for module, edges in import_graph().items():
        packages.setdefault(unit(module), set()).update(unit(t) for t in edges if unit(t) != unit(module))
    assert cycles(packages) == []


def test_the_scan_sees_a_cycle_and_an_upward_import():
    """The checks above would fail on a circle or on an arrow pointing up (no false green)."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    graph = import_graph()
    assert "posttrain.workers.microbatch" in graph["posttrain.workers.actor"]  # a downward arrow is seen
    assert LAYER_OF[unit("posttrain.cli.train")] > LAYER_OF[unit("posttrain.trainer.run")] > LAYER_OF[unit("posttrain.workers.actor")]
