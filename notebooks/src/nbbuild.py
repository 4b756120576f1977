"""Shared writer for the notebook builder scripts (02, 03): ``CELLS`` -> an output-free ``.ipynb``.

``CELLS`` is a list of ``(kind, source[, tags])`` with kind ``"md"`` or ``"code"``.
"""

from pathlib import Path

import nbformat as nbf


def build(cells) -> nbf.NotebookNode:
    """A python3 notebook holding ``cells`` in order, no outputs."""
    nb = nbf.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    for kind, src, *tags in cells:
        cell = nbf.v4.new_markdown_cell(src) if kind == "md" else nbf.v4.new_code_cell(src)
        if tags:
            cell.metadata["tags"] = tags[0]
        nb.cells.append(cell)
    return nb


def write(cells, name: str) -> Path:
    """Write ``notebooks/<name>`` from ``cells``; returns its path."""
    out = Path(__file__).resolve().parents[1] / name
    nbf.write(build(cells), out)
    print(f"wrote {out}")
    return out
