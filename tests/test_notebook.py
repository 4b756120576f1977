"""workbench.notebook: output recording, the stall-free interactive_output, and the headless-runner
property it exists for (nbclient sends nothing on the shell channel while a cell runs)."""

import textwrap

import nbformat
import plotly.graph_objects as go
import plotly.io as pio
import pytest

from workbench.notebook import interactive_output, record_outputs


@pytest.fixture()
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    renderer = pio.renderers.default
    pio.renderers.default = "plotly_mimetype"
    sh = InteractiveShell.instance()
    yield sh
    pio.renderers.default = renderer
    InteractiveShell.clear_instance()


def _show(y):
    import sys

    print("before", y)
    go.Figure(go.Scatter(x=[0, 1], y=[y, 2 * y])).show()
    print("after")
    print("warn", file=sys.stderr)


def test_record_outputs_keeps_order_and_publishes_nothing(shell, capsys):
    outs = record_outputs(_show, 3)
    assert [o["output_type"] for o in outs] == ["stream", "display_data", "stream", "stream"]
    assert [o.get("name") for o in outs] == ["stdout", None, "stdout", "stderr"]
    assert outs[0]["text"] == "before 3\n" and outs[2]["text"] == "after\n" and outs[3]["text"] == "warn\n"
    fig = outs[1]["data"]["application/vnd.plotly.v1+json"]
    assert list(fig["data"][0]["y"]) == [3, 6]
    assert capsys.readouterr() == ("", "")  # nothing leaked to the real streams


def test_record_outputs_clear_output_and_errors(shell):
    from IPython.display import clear_output

    def f():
        print("dropped")
        clear_output(wait=True)
        print("kept")

    assert record_outputs(f) == ({"output_type": "stream", "name": "stdout", "text": "kept\n"},)
    with pytest.raises(ZeroDivisionError):
        record_outputs(lambda: 1 / 0)


def test_interactive_output_redraws_on_change(shell):
    import ipywidgets as widgets

    s = widgets.IntSlider(value=2, min=0, max=10)
    out = interactive_output(_show, {"y": s})
    assert list(out.outputs[1]["data"]["application/vnd.plotly.v1+json"]["data"][0]["y"]) == [2, 4]
    s.value = 5
    assert out.outputs[0]["text"] == "before 5\n"
    assert list(out.outputs[1]["data"]["application/vnd.plotly.v1+json"]["data"][0]["y"]) == [5, 10]

    def fails(y):
        if y > 6:
            raise ValueError(f"no data for {y}")
        print(y)

    out2 = interactive_output(fails, {"y": s})
    assert out2.outputs == ({"output_type": "stream", "name": "stdout", "text": "5\n"},)
    s.value = 7  # a failing redraw shows the error in place of the figure
    assert out2.outputs[0]["output_type"] == "error" and out2.outputs[0]["evalue"] == "no data for 7"
    with pytest.raises(ValueError, match="no data for 7"):
        interactive_output(fails, {"y": s})  # the first draw raises in the cell


def _shell_sends(helper: str) -> int:
    """Execute a one-cell widget notebook with nbclient; count the messages nbclient sent on the shell
    channel while the cell ran, beyond its execute_request (its Output-widget mimic's comm_msg's)."""
    from jupyter_client.channels import AsyncZMQSocketChannel
    from nbclient import NotebookClient

    src = textwrap.dedent(f"""
        import ipywidgets as widgets
        import plotly.graph_objects as go
        from IPython.display import display
        {helper}
        s = widgets.IntSlider(value=2)
        display(s, interactive_output(lambda y: go.Figure(go.Scatter(y=[y, 1])).show(), {{"y": s}}))
    """)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(src)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    client = NotebookClient(nb, timeout=120)
    sent: list[str] = []
    orig = AsyncZMQSocketChannel.send

    def send(self, msg):
        if client.kc is not None and self is client.kc.shell_channel:
            sent.append(msg["header"]["msg_type"])
        return orig(self, msg)

    AsyncZMQSocketChannel.send = send
    try:
        client.execute()
    finally:
        AsyncZMQSocketChannel.send = orig
    assert nb.cells[0].outputs[-1]["data"]["application/vnd.jupyter.widget-view+json"]
    return sum(m == "comm_msg" for m in sent)


@pytest.mark.slow
def test_headless_runner_sends_nothing_on_shell_while_the_cell_runs():
    # ipywidgets' interactive_output makes nbclient send comm_msg's on the shell channel while it waits
    # there for the execute_reply: the pattern that now and then loses the reply (a stalled cell)
    assert _shell_sends("from ipywidgets import interactive_output") >= 1
    assert _shell_sends("from workbench.notebook import interactive_output") == 0


def test_panel_hides_single_option_controls_and_carries_small_multiples(shell):
    import ipywidgets as widgets

    from workbench.notebook import Panel, panel

    k = widgets.SelectionSlider(options=[1, 2, 4], value=2, description="k")
    only = widgets.Dropdown(options=["int4"], description="draft")
    p = panel(lambda k, d: go.Figure(go.Bar(y=[k]), layout_title_text=f"k={k} {d}").show(), {"k": k, "d": only},
              vary="k")
    assert isinstance(p, Panel) and isinstance(p, widgets.VBox)
    assert only.layout.display == "none" and k.layout.display is None  # one option: hidden
    bundle = p._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    static = bundle["text/html"]
    assert [c.split("</div>")[0] for c in static.split('class="wb-caption">')[1:]] == ["k = 1", "k = 2", "k = 4"]
    assert static.count("Plotly.newPlot") == 3 and '"text":"k=4int4"' in static.replace(" ", "")
    k.value = 4  # the live figure still follows the slider
    assert p.children[-1].outputs[0]["data"]["application/vnd.plotly.v1+json"]["layout"]["title"]["text"] == "k=4 int4"


@pytest.mark.parametrize(("v", "text"), [(39.43770, "39.4"), (0.0034, "0.00340"), (2143567.3, "2,143,567"),
                                         (1e-12, "0.00000000"), (12, "12"), (float("nan"), ""), (True, "True")])
def test_fmt_number_is_fixed_notation(v, text):
    from workbench.notebook import fmt_number

    assert fmt_number(v) == text


def test_table_rounds_shortens_and_never_uses_exponents():
    import pandas as pd

    from workbench.notebook import table

    df = pd.DataFrame({"label": ["RTN W4 tensor sym", "GPTQ W4 g128 asym with a long descriptive name"],
                       "ppl": [3.943770e+01, 2.1e6], "kl_mean": [0.0034, 10.9], "weight_bytes": [123456789, 5]})
    html = table(df, max_chars=20).to_html()
    import re

    assert not re.search(r"\de[+-]\d", html)  # no 3.943770e+01
    assert "39.4" in html and "2,100,000" in html and "0.00340" in html and "123,456,789" in html
    assert "GPTQ W4 g128 asym w…" in html and "kl mean" in html and "weight bytes" in html  # headers wrap
    assert "<th class=\"blank" not in html  # no RangeIndex column
    ci = table(pd.DataFrame({"alpha": [0.8123], "alpha_lo": [0.75], "alpha_hi": [0.86], "c": [1.0]})).to_html()
    assert "alpha [95% CI]" in ci and "0.812 [0.750, 0.860]" in ci and "alpha lo" not in ci


def test_fields_prints_a_dataclass_readably():
    from dataclasses import dataclass

    from workbench.notebook import fields

    @dataclass(frozen=True)
    class Cost:
        a: float  # fixed cost, ms
        floor: tuple = (0.0, 1.23456789e-05)  # second line
        source: str = ""  # "fit to <n> points"

    html = fields(Cost(a=0.123456789123, source="fit to 12 points")).to_html()
    assert "0.1235" in html and "0.00001235" in html and "fixed cost, ms" in html and "second line" in html
    assert "0.123456789123" not in html and "fit to &lt;n&gt; points" in html
    with pytest.raises(TypeError, match="dataclass"):
        fields(3)
