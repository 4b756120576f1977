"""The notebooks as a user sees them: JupyterLab on 127.0.0.1 driven by headless Chromium (Playwright).

Runs every cell of notebook 00 and of notebook 03 (an explorer) at smoke size, then checks what the page
shows: no error output and no stderr noise, every plotly figure drawn live (``.js-plotly-plot`` with
plotly's internal ``_fullLayout``, so the figure was really drawn), and a slider move redraws the panel's
figure. Chromium is Debian's (``apt-get install chromium``; ``$WB_CHROMIUM`` overrides its path):
Playwright's own browser downloads are not reachable here. Set ``$WB_BROWSER_SHOTS`` to a folder to
keep PNG screenshots of each notebook.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # each test runs notebooks or a kernel: > 5 s

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("WB_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
# launch flags that work on a closed network as root (no sandbox, no background connections)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOKEN = "workbench-browser-test"
# stderr a notebook may still show, each until its source silences it (none now: transformers' warning about
# clean_up_tokenization_spaces on a BPE tokenizer is silenced where load_model returns the tokenizer).
# Anything on stderr fails the test.
ALLOWED_STDERR: tuple = ()

# JavaScript run in the page (JupyterLab started with --LabApp.expose_app_in_browser, window.jupyterapp)
_STATE = """() => {
  const nb = window.jupyterapp.shell.currentWidget;
  const cells = nb.content.widgets.filter(c => c.model.type === 'code');
  const outs = cells.flatMap(c => c.model.outputs.toJSON());
  return {status: nb.sessionContext.kernelDisplayStatus,
          pending: cells.filter(c => c.model.executionCount === null).length,
          running: document.querySelectorAll('.jp-InputPrompt').length
                   - [...document.querySelectorAll('.jp-InputPrompt')].filter(p => !p.textContent.includes('*')).length,
          errors: outs.filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue),
          stderr: outs.filter(o => o.output_type === 'stream' && o.name === 'stderr').map(o => o.text),
          figures: document.querySelectorAll('.js-plotly-plot').length,
          drawn: [...document.querySelectorAll('.js-plotly-plot')].filter(g => g._fullLayout).length};
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def missing_browser(chromium: str = CHROMIUM) -> str | None:
    """Why the browser tests cannot run here (None when they can): Playwright's Python package, its
    driver (the Node.js program it ships) or the Chromium executable ``chromium`` is missing."""
    try:
        from playwright._impl._driver import compute_driver_executable
    except ImportError:
        return "playwright is not installed: pip install -r requirements/cpu.txt"
    node, cli = compute_driver_executable()
    for part in (node, cli):
        if not Path(part).exists():
            return f"Playwright's driver is missing ({part}): pip install --force-reinstall playwright"
    if not Path(chromium).exists():
        return f"no Chromium at {chromium}: apt-get install chromium (or set WB_CHROMIUM to its path)"
    return None


@pytest.fixture(scope="module")
def chromium() -> str:
    """The Chromium executable; every test that needs a browser skips here, with one message, without it."""
    why = missing_browser()
    if why:
        pytest.skip(f"browser tests skipped: {why}")
    return CHROMIUM


@pytest.fixture(scope="module")
def lab(chromium, tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 over a copy of ``notebooks/*.ipynb`` (autosave off, so nothing is
    written back), kernels at smoke size; yields its base URL."""
    tmp = tmp_path_factory.mktemp("lab")
    (tmp / "notebooks").mkdir()
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        shutil.copy(nb, tmp / "notebooks")
    settings = {"@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False},
                "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false"}}
    for rel, value in settings.items():
        (tmp / "settings" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / "settings" / rel).write_text(json.dumps(value))
    port = _free_port()
    env = {**os.environ, "WB_SMOKE": "1", "WORKBENCH_RESULTS": str(tmp / "results"), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "JUPYTER_CONFIG_DIR": str(tmp / "config"),
           "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"), "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "ws"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env.pop("WORKBENCH_PLOTLY_RENDERER", None)  # the live renderer the notebooks choose themselves
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           "--allow-root", f"--IdentityProvider.token={TOKEN}", f"--ServerApp.root_dir={tmp / 'notebooks'}",
           "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=", "--LabApp.extension_manager=readonly",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    log = open(tmp / "lab.log", "w")  # noqa: SIM115 - closed below, after the server stops
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"JupyterLab exited: {(tmp / 'lab.log').read_text()[-2000:]}")
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.fixture(scope="module")
def browser(chromium, tmp_path_factory):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=chromium, headless=True,
            args=FLAGS, viewport={"width": 1400, "height": 1000})
        yield ctx
        ctx.close()


def _run_all(page, url: str, notebook: str, timeout_s: float = 240):
    """Open ``notebook`` in JupyterLab, run all cells, wait until the kernel is idle with every code cell
    executed; return the final page state (see ``_STATE``)."""
    page.goto(f"{url}/lab/tree/{notebook}?token={TOKEN}&reset")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                           " && window.jupyterapp.shell.currentWidget.sessionContext"
                           " && window.jupyterapp.shell.currentWidget.sessionContext.kernelDisplayStatus === 'idle'",
                           timeout=120_000)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        s = page.evaluate(_STATE)
        if s["errors"] or (s["status"] == "idle" and s["pending"] == 0 and s["running"] == 0):
            page.wait_for_timeout(1500)  # let the last figures draw
            return page.evaluate(_STATE)
        page.wait_for_timeout(1000)
    pytest.fail(f"{notebook}: cells still running after {timeout_s} s: {page.evaluate(_STATE)}")


def _shot(page, name: str):
    folder = os.environ.get("WB_BROWSER_SHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=False)


_PANEL_FIGURES = """(label) => {
  const s = [...document.querySelectorAll('.widget-slider')].find(
      w => w.querySelector('.widget-label') && w.querySelector('.widget-label').textContent.trim() === label);
  const figs = [...s.closest('.jp-OutputArea-output').querySelectorAll('.js-plotly-plot')];
  return figs.every(g => g._fullLayout) ? JSON.stringify(figs.map(g => [g.layout.title, g.data.map(
      t => [t.name, t.x, t.y])])) : null;
}"""


def _panel_figures(page, slider_label: str) -> str | None:
    """The JSON of the titles and data of every plotly figure in the slider panel whose slider reads
    ``slider_label`` (None while one of them is not drawn yet)."""
    return page.evaluate(_PANEL_FIGURES, slider_label)


def _move_slider(page, slider_label: str):
    """Press the right arrow, then the left if the slider was at its end, on the slider's handle
    (noUiSlider handles keys; the widget then sets its value as a drag would)."""
    handle = page.locator(".widget-slider", has=page.locator(".widget-label", has_text=slider_label)).locator(
        ".noUi-handle").first
    handle.scroll_into_view_if_needed()
    before = handle.get_attribute("aria-valuenow")
    handle.focus()
    handle.press("ArrowRight")
    if handle.get_attribute("aria-valuenow") == before:
        handle.press("ArrowLeft")


@pytest.mark.parametrize(("notebook", "slider"), [("00_quickstart.ipynb", "run"),
                                                  ("03_pd_disaggregation.ipynb", "rate req/s")])
def test_notebook_runs_in_a_real_browser(lab, browser, notebook, slider):
    page = browser.new_page()
    console = []
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    try:
        s = _run_all(page, lab, notebook)
        assert not s["errors"], f"{notebook}: error outputs {s['errors']}"
        assert s["figures"] >= 2 and s["drawn"] == s["figures"], f"{notebook}: figures not drawn live: {s}"
        before = _panel_figures(page, slider)
        assert before, f"{notebook}: no drawn figure in the panel of slider {slider!r}"
        _move_slider(page, slider)
        page.wait_for_function(f"([label, before]) => {{ const now = ({_PANEL_FIGURES})(label);"
                               " return now !== null && now !== before; }", arg=[slider, before], timeout=30_000)
        noise = [t for t in s["stderr"] if not any(a in t for a in ALLOWED_STDERR)]
        assert not noise, f"{notebook}: stderr shown to the user: {noise}"
    finally:
        _shot(page, notebook.removesuffix(".ipynb"))
        page.close()


_REPORT_CELLS = [
    ("import ipywidgets as widgets\nimport plotly.graph_objects as go\nfrom tqdm.auto import tqdm\n"
    "import workbench.notebook as wbn\nwbn.setup()"),
    "for _ in tqdm(range(3), desc='points'):\n    pass",
    "go.Figure(go.Scatter(x=[0, 1], y=[1, 2]))",
    ("y = widgets.SelectionSlider(options=[1, 2, 3], value=2, description='height')\n"
    "wbn.panel(lambda h: go.Figure(go.Bar(y=[h])).show(), {'h': y}, vary='h')"),
]


def test_exported_report_works_offline_from_disk(browser, tmp_path):
    """An executed notebook with a figure, a progress bar and a slider panel, exported by
    workbench.report and opened from disk with the network off: every figure is drawn (the panel as
    three small multiples), the progress bar shows its final state, and the page asks for nothing
    outside the file."""
    import nbformat
    from nbclient import NotebookClient

    from workbench.report import export_html

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in _REPORT_CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    env_renderer = os.environ.pop("WORKBENCH_PLOTLY_RENDERER", None)
    try:
        NotebookClient(nb, timeout=120).execute()
    finally:
        if env_renderer is not None:
            os.environ["WORKBENCH_PLOTLY_RENDERER"] = env_renderer
    nbformat.write(nb, tmp_path / "r.ipynb")
    html_path = export_html(tmp_path / "r.ipynb")
    assert (tmp_path / "r.ipynb").stat().st_size < 200_000  # no plotly.js copy in the notebook

    browser.set_offline(True)
    page = browser.new_page()
    outside, console = [], []
    page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(("file:", "data:")) else None)
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    try:
        page.goto(html_path.as_uri())
        page.wait_for_timeout(1500)
        state = page.evaluate("""() => ({
            drawn: [...document.querySelectorAll('.js-plotly-plot')].filter(
                g => g._fullLayout && g.getBoundingClientRect().height > 200).length,
            multiples: [...document.querySelectorAll('.wb-multiple')].map(m => m.querySelector('.wb-caption').textContent),
            progress: [...document.querySelectorAll('progress')].map(p => [p.value, p.max])})""")
        _shot(page, "report_offline")
    finally:
        page.close()
        browser.set_offline(False)
    assert not outside, f"the report asked the network for {outside}"
    assert not console, f"console errors: {console}"
    assert state["multiples"] == ["height = 1", "height = 2", "height = 3"]
    assert state["drawn"] == 4  # the figure and the panel's three small multiples
    assert state["progress"] == [[3, 3]]


@pytest.mark.parametrize("setting, expect", [("chromium", "no Chromium at /nonexistent/chromium"),
                                             ("node", "Playwright's driver is missing")])
def test_missing_browser_names_the_fix(monkeypatch, setting, expect):
    """What the skip says without Chromium or without Playwright's driver (a node path that is not there)."""
    if setting == "node":
        monkeypatch.setenv("PLAYWRIGHT_NODEJS_PATH", "/nonexistent/node")
    why = missing_browser("/nonexistent/chromium")
    assert why is not None and why.startswith(expect)
