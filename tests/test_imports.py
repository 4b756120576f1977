"""No import cycles in the package: a static graph of every ``import`` in ``workbench/`` (module level
and function level alike: a function-local import that closes a cycle still is one), checked for
strongly connected components. Checked on a planted package first, so the check can fail."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``root / package``."""
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its body (``from p import name`` counts
    as importing ``p.name`` when that is a module, else ``p``), with the packages each import
    initializes on the way."""
    mods = module_names(root, package)
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = mod.split(".")[: len(mod.split(".")) - node.level + (1 if is_pkg else 0)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:  # importing a.b.c runs a/__init__ and a/b/__init__ first, unless
                parts = t.split(".")  # they are packages mod itself sits in (then they already run)
                graph[mod] |= {p for p in (".".join(parts[:k]) for k in range(1, len(parts) + 1))
                               if p in mods and p != mod and not mod.startswith(p + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan 1972), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out, key=sorted)


def test_check_finds_a_planted_function_local_cycle(tmp_path):
    pkg = tmp_path / "toy"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from toy.sub.b import g\n")
    (pkg / "a.py").write_text("import toy.sub\n\ndef f():\n    from toy.c import h\n    return h\n")
    (pkg / "sub" / "b.py").write_text("def g():\n    from .. import c\n    return c\n")
    (pkg / "c.py").write_text("import os\n")
    graph = import_graph(tmp_path, "toy")
    assert graph["toy.sub.b"] == {"toy.c"} and graph["toy.a"] == {"toy.sub", "toy.c"}
    assert graph["toy.sub"] == {"toy.sub.b"} and cycles(graph) == []
    (pkg / "c.py").write_text("def h():\n    from toy import a  # closes a -> sub -> sub.b -> c -> a\n    return a\n")
    assert cycles(import_graph(tmp_path, "toy")) == [frozenset({"toy.a", "toy.sub", "toy.sub.b", "toy.c"})]


def test_workbench_has_no_import_cycle():
    found = cycles(import_graph(ROOT, "workbench"))
    assert not found, "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in found)
