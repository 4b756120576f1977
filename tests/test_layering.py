"""The package's layers: a study imports what it measures; nothing below imports a study; the quantization
package does not import the evaluation, P/D or results modules; ``workbench.device`` imports no technique."""

import ast
from pathlib import Path

import pytest

import workbench

ROOT = Path(workbench.__file__).parent


def imports_of(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return {m for m in out if m.startswith("workbench")}


def package_imports(sub: str) -> dict[str, set[str]]:
    base = ROOT / sub
    files = [base] if base.suffix == ".py" else sorted(base.rglob("*.py"))
    return {str(f.relative_to(ROOT)): imports_of(f) for f in files}


@pytest.mark.parametrize("sub", ["engine", "kernels", "quant", "spec", "pd", "eval", "models", "stack", "claims",
                                 "bridges", "device.py", "results.py", "data.py", "params.py"])
def test_nothing_below_imports_a_study(sub):
    bad = {f: sorted(m for m in mods if m.startswith("workbench.studies")) for f, mods in package_imports(sub).items()}
    assert not any(bad.values()), {f: m for f, m in bad.items() if m}


@pytest.mark.parametrize(("sub", "forbidden"), [
    ("quant", ("workbench.eval", "workbench.pd", "workbench.results")),
    ("device.py", ("workbench.pd", "workbench.quant", "workbench.spec", "workbench.engine")),
    ("engine", ("workbench.quant", "workbench.spec", "workbench.pd", "workbench.results")),
])
def test_forbidden_imports(sub, forbidden):
    bad = {f: sorted(m for m in mods if m.startswith(forbidden)) for f, mods in package_imports(sub).items()}
    assert not any(bad.values()), {f: m for f, m in bad.items() if m}


def test_the_checker_sees_a_planted_import(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("from workbench.studies import quant\nimport workbench.pd.sim\n")
    assert imports_of(f) == {"workbench.studies", "workbench.pd.sim"}
