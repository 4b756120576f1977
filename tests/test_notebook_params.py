"""Every notebook reads its boolean ``WB_*`` parameters through :mod:`workbench.params` (``env_flag``,
``study_size``), the one parser that accepts 1/0, true/false, yes/no, on/off in any case and refuses
anything else. A notebook that compares ``os.getenv("WB_X")`` with strings itself reads ``WB_FULL=no`` as
true, ``WB_SMOKE=no`` as smoke mode, and ``WB_RUN_REAL_LOOP=true`` as false.

The check is on the source (``notebooks/src/*.py``, which builds each notebook): a call that reads a
``WB_*`` variable (``os.getenv``, ``os.environ.get``, ``os.environ[...]``) and whose value is compared with
a string literal, or with a tuple of them, is a hand-rolled boolean parse."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "notebooks" / "src").glob("*.py"))


def _wb_name(node: ast.AST) -> str | None:
    """The ``WB_*`` variable a node reads from the environment, or None."""
    if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
        f = node.func
        getenv = isinstance(f, ast.Attribute) and f.attr == "getenv"
        environ_get = (isinstance(f, ast.Attribute) and f.attr == "get" and isinstance(f.value, ast.Attribute)
                       and f.value.attr == "environ")
        name = node.args[0].value
    elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "environ":
        getenv, environ_get, name = True, False, getattr(node.slice, "value", None)
    else:
        return None
    return name if (getenv or environ_get) and isinstance(name, str) and name.startswith("WB_") else None


def _is_strings(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and all(_is_strings(e) for e in node.elts)


def hand_parsed_flags(source: str) -> list[str]:
    """``WB_*`` variables that ``source`` reads and compares with string literals, with their line numbers."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            names = [n for n in map(_wb_name, operands) if n]
            if names and any(_is_strings(o) for o in operands):
                found.append(f"{names[0]} (line {node.lineno})")
    return found


def test_the_check_finds_hand_parsed_flags():
    src = ('import os\nA = os.getenv("WB_FULL", "0") not in ("", "0", "false")\nB = os.environ.get("WB_X") == "1"\n'
           'C = os.environ["WB_Y"] in {"yes"}\nfrom workbench.params import env_flag\nD = env_flag("WB_SMOKE")\n'
           'E = int(os.getenv("WB_N", 3))\n')
    assert hand_parsed_flags(src) == ["WB_FULL (line 2)", "WB_X (line 3)", "WB_Y (line 4)"]


@pytest.mark.parametrize("src", SOURCES, ids=lambda p: p.stem)
def test_notebook_reads_its_flags_through_workbench_params(src):
    assert SOURCES, "notebooks/src/ holds no notebook source"
    hand = hand_parsed_flags(src.read_text())
    assert not hand, f"{src.name} parses booleans itself: {hand}; use workbench.params.env_flag / study_size"
