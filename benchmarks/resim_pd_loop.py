"""Re-simulate notebook 03's real serving loop from an executed notebook's own profile, with the prefill line fitted
to every profile point (the fit before :meth:`workbench.pd.CostModel.fit` left graph-replayed steps out) and to the
eager steps only (the fit now), against the loop's measured TTFT / TPOT / E2E latency in the same notebook.

No device needed: the simulator is deterministic given the cost model and the workload. The profile points and the
measured metrics are read from the notebook's output tables (``cost_here.residuals(profile)`` and
``compare_to_sim``); the loop's workload and simulator configuration are notebook 03's defaults on CUDA (24
requests at 0.3 req/s, 64-token prompts, 4-24 output tokens, seed 0; one instance, ``max_batch`` 16, ``max_seq``
321, ``max_prefill_batch`` 2: the notebook's runner for the CUDA profile). A step of at most ``--graph-max-t``
tokens per row counts as graph-replayed (the engine's default, 16).

    python -m benchmarks.resim_pd_loop benchmarks/results/h200_2026-12-01c/notebooks/03_pd_disaggregation.ipynb \\
        --out benchmarks/results/h200_2026-12-01c/resim_pd_loop.json
"""

from __future__ import annotations

import argparse
import html
import json
import re
import types
from pathlib import Path

import pandas as pd

from workbench.pd import CostModel
from workbench.pd.loop import sim_config_for
from workbench.pd.metrics import summarize
from workbench.pd.sim import LengthDist, WorkloadConfig, generate_workload, simulate

METRICS = ("mean_ttft_ms", "p50_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p50_tpot_ms",
           "mean_e2e_ms", "p50_e2e_ms", "p90_e2e_ms", "p99_e2e_ms")


def _tables(nb: dict) -> list[list[list[str]]]:
    """Every HTML table of the notebook's outputs as rows of cell texts."""
    out = []
    for c in nb["cells"]:
        for o in c.get("outputs", []):
            h = "".join(o.get("data", {}).get("text/html", ""))
            for t in re.findall(r"<table.*?</table>", h, flags=re.DOTALL):
                rows = [[html.unescape(re.sub(r"<[^>]+>", "", x)).strip()
                         for x in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", r, flags=re.DOTALL)]
                        for r in re.findall(r"<tr.*?</tr>", t, flags=re.DOTALL)]
                out.append([r for r in rows if r])
    return out


def read_notebook(path: str, graph_max_t: int) -> tuple[pd.DataFrame, dict]:
    """``(profile, measured)``: the profile rows (phase, batch, seq_len, n_tokens, attn_sq, kv_tokens, ms, graph)
    and the real loop's metrics (``mean_ttft_ms`` ... as in :func:`workbench.pd.metrics.summarize`)."""
    tables = _tables(json.loads(Path(path).read_text()))
    prof = next(t for t in tables if t[0][:3] == ["phase", "batch", "seq len"] and "pred ms" in t[0])
    rows = []
    for r in prof[1:]:
        phase, b, L, ms = r[0], int(r[1]), int(r[2]), float(r[3])
        pre = phase == "prefill"
        rows.append({"phase": phase, "batch": b, "seq_len": L, "n_tokens": b * L if pre else b,
                     "attn_sq": b * L * L if pre else 0, "kv_tokens": 0 if pre else b * L, "ms": ms,
                     "graph": (L if pre else 1) <= graph_max_t})
    cmp = next(t for t in tables if t[0][:3] == ["metric", "real", "sim"])
    measured = {r[0]: float(r[1]) for r in cmp[1:]}
    return pd.DataFrame(rows), measured


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("notebook")
    ap.add_argument("--out", required=True)
    ap.add_argument("--graph-max-t", type=int, default=16)
    a = ap.parse_args(argv)
    profile, measured = read_notebook(a.notebook, a.graph_max_t)
    wl = generate_workload(WorkloadConfig(n_requests=24, rate=0.3, prompt=LengthDist("fixed", 64),
                                          output=LengthDist("uniform", low=4, high=24), seed=0))
    cfg = sim_config_for(types.SimpleNamespace(max_batch=16, max_seq=321), max_prefill_batch=2)
    out = {"notebook": a.notebook, "measured": measured, "fits": {}}
    for name, prof in (("all points (before)", profile.drop(columns="graph")), ("eager prefill only (now)", profile)):
        cost = CostModel.fit(prof)
        sim = summarize(simulate(wl, cfg, cost)).iloc[0]
        out["fits"][name] = {"cost": cost.as_dict(),
                             "sim": {m: float(sim[m]) for m in METRICS},
                             "err_pct": {m: 100.0 * (float(sim[m]) / measured[m] - 1.0) for m in METRICS if m in measured}}
        print(f"{name}: {cost.source}; a={cost.a:.3f} ms b={cost.b:.5f} ms/token")
        for m in METRICS:
            if m in measured:
                print(f"  {m:14s} real {measured[m]:8.2f}  sim {float(sim[m]):8.2f}  "
                      f"err {out['fits'][name]['err_pct'][m]:+6.1f}%")
    Path(a.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
