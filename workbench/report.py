"""Executed notebook -> a self-contained HTML report that works offline (``make reports``).

nbconvert's ``lab`` HTML template loads require.js, MathJax, mermaid and the Jupyter widget manager
from CDNs, and drops figures stored only as plotly JSON (the live renderer, :func:`workbench.notebook.setup`).
Here the notebook is first rewritten, then exported with a template that loads nothing from the network:

* every ``application/vnd.plotly.v1+json`` output gains a ``text/html`` drawing of the same figure;
  plotly.js (from the installed plotly wheel) is inlined once in the page head, so no figure depends
  on which cell first loaded it;
* every widget output is replaced by a static view: a slider panel's own small multiples
  (:class:`workbench.notebook.Panel` stores them as ``text/html`` beside the widget), otherwise a
  drawing of the widget's saved state (``nbclient`` stores it in ``metadata.widgets`` while executing:
  ``ExecutePreprocessor.store_widget_state``, on by default), e.g. a finished progress bar;
* the widget state is then removed, so the page asks for no widget manager.

Run ``python -m workbench.report reports/00_quickstart.ipynb [...]``: writes ``reports/00_quickstart.html``.
"""

from __future__ import annotations

import argparse
import copy
import html
from pathlib import Path

import nbformat

from workbench.notebook import outputs_html

__all__ = ["export_html", "static_notebook", "widget_html"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
PLOTLY = "application/vnd.plotly.v1+json"
TEMPLATES = Path(__file__).resolve().parent / "templates"


def widget_html(model_id: str, state: dict, depth: int = 0) -> str:
    """Static HTML for the widget ``model_id`` drawn from saved widget ``state`` (``{id: {"model_name",
    "state"}}``, the ``metadata.widgets`` state of nbformat): boxes lay out their children, text and HTML
    widgets show their value, progress bars a ``<progress>``, selection controls "description: value",
    ``Output`` widgets their outputs (:func:`workbench.notebook.outputs_html`). Unknown or missing
    models draw as ""."""
    entry = state.get(model_id)
    if entry is None or depth > 20:
        return ""
    name, s = entry.get("model_name", ""), entry.get("state", {})
    desc = html.escape(str(s.get("description", "")))
    if name in ("HBoxModel", "VBoxModel", "BoxModel", "GridBoxModel"):
        flow = "row" if name == "HBoxModel" else "column"
        kids = "".join(widget_html(str(c).removeprefix("IPY_MODEL_"), state, depth + 1) for c in s.get("children", []))
        return f'<div style="display:flex;flex-direction:{flow};gap:6px;align-items:center">{kids}</div>'
    if name in ("HTMLModel", "HTMLMathModel"):
        return f"<span>{s.get('value', '')}</span>"
    if name in ("LabelModel", "TextModel"):
        return f"<span>{html.escape(str(s.get('value', '')))}</span>"
    if name in ("FloatProgressModel", "IntProgressModel"):
        return f'<progress value="{s.get("value", 0)}" max="{s.get("max", 100)}"></progress>'
    if name == "OutputModel":
        return outputs_html(s.get("outputs", []))
    if "index" in s and "_options_labels" in s:
        idx = s["index"] if isinstance(s["index"], list) else [s["index"]]
        labels = [s["_options_labels"][i] for i in idx if i is not None and 0 <= i < len(s["_options_labels"])]
        return f"<span><b>{desc}</b> {html.escape(', '.join(map(str, labels)))}</span>"
    if "value" in s and name.endswith(("SliderModel", "TextModel", "CheckboxModel")):
        return f"<span><b>{desc}</b> {html.escape(str(s['value']))}</span>"
    return ""


def static_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``nb`` that nbconvert exports without network access (see the module docstring)."""
    nb = copy.deepcopy(nb)
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data")
            if not data:
                continue
            if WIDGET_VIEW in data:
                view = data.pop(WIDGET_VIEW)
                if "text/html" not in data:
                    drawn = widget_html(view.get("model_id", ""), state)
                    if drawn:
                        data["text/html"] = drawn
            if PLOTLY in data and "text/html" not in data:
                data["text/html"] = outputs_html([{"output_type": "display_data", "data": {PLOTLY: data[PLOTLY]}}])
    nb.metadata.pop("widgets", None)
    return nb


def export_html(ipynb: str | Path, out: str | Path | None = None) -> Path:
    """Write the offline HTML report of the executed notebook ``ipynb`` to ``out`` (default: beside it,
    ``.html``) and return its path. Raises ``FileNotFoundError`` for a missing notebook."""
    from nbconvert import HTMLExporter
    from plotly.offline import get_plotlyjs

    src = Path(ipynb)
    nb = nbformat.read(src, as_version=4)
    exporter = HTMLExporter(template_name="workbench", extra_template_basedirs=[str(TEMPLATES)])
    body, _ = exporter.from_notebook_node(static_notebook(nb), resources={"plotlyjs": get_plotlyjs()})
    dest = Path(out) if out is not None else src.with_suffix(".html")
    dest.write_text(body, encoding="utf-8")
    return dest


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m workbench.report", description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="+", type=Path, help="executed .ipynb files; each gets a .html beside it")
    for path in ap.parse_args(argv).notebooks:
        dest = export_html(path)
        print(f"wrote {dest} ({dest.stat().st_size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
