"""workbench.report: the static notebook an offline HTML report is exported from."""

import nbformat

from workbench.report import PLOTLY, WIDGET_STATE, WIDGET_VIEW, static_notebook, widget_html

FIG = {"data": [{"type": "bar", "y": [1, 2]}], "layout": {"title": {"text": "bars"}}}


def _state():
    return {
        "box": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_desc", "IPY_MODEL_bar", "IPY_MODEL_out"]}},
        "desc": {"model_name": "HTMLModel", "state": {"value": "points: 100%"}},
        "bar": {"model_name": "FloatProgressModel", "state": {"value": 3, "max": 3}},
        "out": {"model_name": "OutputModel", "state": {"outputs": [{"output_type": "stream", "name": "stdout",
                                                                    "text": "a < b"}]}},
        "dd": {"model_name": "DropdownModel", "state": {"description": "draft", "index": 1,
                                                        "_options_labels": ["int4", "int8"]}},
    }


def test_widget_html_draws_saved_state():
    html = widget_html("box", _state())
    assert "points: 100%" in html and '<progress value="3" max="3">' in html and "a &lt; b" in html
    assert "<b>draft</b> int8" in widget_html("dd", _state())
    assert widget_html("missing", _state()) == ""


def test_static_notebook_replaces_widgets_and_draws_figures():
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {WIDGET_STATE: {"state": _state(), "version_major": 2, "version_minor": 0}}
    outs = [nbformat.v4.new_output("display_data", data={PLOTLY: FIG, "text/plain": "Figure"}),
            nbformat.v4.new_output("display_data", data={WIDGET_VIEW: {"model_id": "box"}, "text/plain": "HBox"}),
            nbformat.v4.new_output("display_data", data={WIDGET_VIEW: {"model_id": "dd"}, "text/html": "<p>static</p>",
                                                         "text/plain": "Panel"})]
    nb.cells.append(nbformat.v4.new_code_cell("x", outputs=outs))
    out = static_notebook(nb)
    figure, progress, panel = (o["data"] for o in out.cells[0].outputs)
    assert "Plotly.newPlot" in figure["text/html"] and '"bars"' in figure["text/html"]
    assert "<script src" not in figure["text/html"]  # plotly.js comes once, from the page head
    assert WIDGET_VIEW not in progress and "<progress" in progress["text/html"]
    assert panel["text/html"] == "<p>static</p>" and WIDGET_VIEW not in panel  # the panel's own static view
    assert "widgets" not in out.metadata and "widgets" in nb.metadata  # a copy: the input is untouched
