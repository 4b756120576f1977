"""No import cycles through the engine and kernel packages: a static graph of every ``import`` statement in
``workbench`` (module level and inside functions, since a function-local import that dodges a cycle is a cycle
too), module to module (the implicit import of a package's ``__init__``, which re-exports its modules, is not an
edge), then its strongly connected components (Tarjan 1972). On the code before the shared ``kernels.common``
module this finds ``kernels.gemv <-> kernels.w4a16``."""

import ast
from pathlib import Path

import workbench

ROOT = Path(workbench.__file__).parent
CHECKED = ("workbench.kernels", "workbench.engine")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict:
    """``{module: {workbench modules it imports}}`` (``from a import b`` counts as ``a.b`` when that is a
    module, else ``a``)."""
    mods = {_module(p): p for p in ROOT.rglob("*.py")}
    graph = {}
    for name, path in mods.items():
        deps = set()
        pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                for a in node.names:
                    deps.add(f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base)
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def cycles(graph: dict) -> list:
    """Strongly connected components of more than one module."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_through_engine_or_kernels():
    found = [c for c in cycles(import_graph()) if any(m.startswith(CHECKED) for m in c)]
    assert found == []


def test_the_check_finds_a_planted_cycle():
    g = import_graph()
    assert "workbench.kernels.common" in g["workbench.kernels.gemv"]  # the graph sees real imports
    g["workbench.kernels.common"] = g["workbench.kernels.common"] | {"workbench.kernels.gemv"}
    assert ["workbench.kernels.common", "workbench.kernels.gemv"] in cycles(g)
