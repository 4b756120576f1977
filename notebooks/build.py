"""Build ``notebooks/NN_*.ipynb`` from the jupytext ``py:percent`` sources in ``notebooks/src/``.

``python notebooks/build.py`` rewrites every notebook (no outputs, cell ids ``cell-00``, ``cell-01``...,
so a rebuild of an unchanged source is byte-identical and merges stay clean); ``make notebooks`` calls it.
``tests/test_notebook_sources.py`` fails when a committed notebook differs from its source.
"""

from pathlib import Path

import jupytext
import nbformat

HERE = Path(__file__).resolve().parent


def sources() -> list[Path]:
    """The notebook sources, ``notebooks/src/NN_*.py``, in order."""
    return sorted((HERE / "src").glob("[0-9][0-9]_*.py"))


def build(src: Path) -> nbformat.NotebookNode:
    """The output-free notebook for one source, with deterministic cell ids."""
    nb = jupytext.read(src)
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i:02d}"
    nb.metadata = {"kernelspec": nb.metadata.get("kernelspec", {"name": "python3", "display_name": "Python 3",
                                                                  "language": "python"})}
    return nb


def main() -> None:
    for src in sources():
        out = HERE / f"{src.stem}.ipynb"
        nbformat.write(build(src), out)
        print(f"wrote {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
