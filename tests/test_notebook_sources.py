"""Each committed ``notebooks/*.ipynb`` is exactly what ``notebooks/build.py`` builds from its jupytext
source in ``notebooks/src/`` (byte for byte: no outputs, fixed cell ids). Edit the source, then run
``make notebooks``."""

import importlib.util
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("nb_build", ROOT / "notebooks" / "build.py")
nb_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nb_build)


def test_every_notebook_has_a_source():
    built = {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert built == {p.stem for p in nb_build.sources()}, "each notebooks/*.ipynb needs notebooks/src/<name>.py"


@pytest.mark.parametrize("src", nb_build.sources(), ids=lambda p: p.stem)
def test_notebook_matches_its_source(src):
    want = nbformat.writes(nb_build.build(src))
    have = (ROOT / "notebooks" / f"{src.stem}.ipynb").read_text()
    assert have.rstrip("\n") == want.rstrip("\n"), f"notebooks/{src.stem}.ipynb drifted from notebooks/src/{src.stem}.py: run `make notebooks`"
    nb = nbformat.reads(have, as_version=4)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
