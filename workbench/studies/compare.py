"""The same study on two engines, side by side, with the differences computed (never described).

``side_by_side({"workbench": df_a, "vllm": df_b}, on=["label"], metrics=["decode_ms_b1", "mmlu_acc"])`` joins the
two frames on ``on`` and, per metric, gives ``<metric>_<engine>`` for both engines, ``<metric>_diff`` (second minus
first) and ``<metric>_ratio`` (second / first). Rows present on one engine only are kept with NaN for the other
(``present`` says where), so a point vLLM could not run shows as such instead of vanishing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["paired_difference", "side_by_side"]


def side_by_side(frames: dict[str, pd.DataFrame], on: list[str], metrics: list[str]) -> pd.DataFrame:
    """Join two engines' frames (``frames``: engine name -> frame, exactly two, in the order to compare) on the key
    columns ``on``; see the module docstring for the columns. A metric missing from one frame is NaN there.

    Raises ``ValueError`` for other than two frames, or a key column missing from one of them."""
    if len(frames) != 2:
        raise ValueError(f"side_by_side compares two engines; got {list(frames)}")
    (a, fa), (b, fb) = frames.items()
    for name, f in ((a, fa), (b, fb)):
        missing = [c for c in on if c not in f]
        if missing:
            raise ValueError(f"the {name} frame has no key column(s) {missing}; its columns: {list(f.columns)}")

    def part(name, f):
        cols = [m for m in metrics if m in f]
        g = f[on + cols].groupby(on, as_index=False, dropna=False).mean(numeric_only=True)
        return g.rename(columns={m: f"{m}_{name}" for m in cols}).assign(**{f"_in_{name}": True})

    out = part(a, fa).merge(part(b, fb), on=on, how="outer")
    for m in metrics:
        x, y = out.get(f"{m}_{a}", np.nan), out.get(f"{m}_{b}", np.nan)
        out[f"{m}_{a}"], out[f"{m}_{b}"] = x, y
        out[f"{m}_diff"] = y - x
        with np.errstate(divide="ignore", invalid="ignore"):
            out[f"{m}_ratio"] = y / x
    ia, ib = out.pop(f"_in_{a}").fillna(False).astype(bool), out.pop(f"_in_{b}").fillna(False).astype(bool)
    out["present"] = np.where(ia & ib, "both", np.where(ia, f"{a} only", f"{b} only"))
    return out


def paired_difference(a: pd.Series, b: pd.Series, level: float = 0.95) -> dict:
    """Mean of ``b - a`` over paired items (e.g. per MMLU question: correct 0/1, or a log-prob) with its Student-t
    interval (:func:`workbench.stats.t_interval`), the share of items where they agree exactly, and ``n``."""
    from workbench.stats import t_interval

    d = (pd.to_numeric(b, errors="coerce") - pd.to_numeric(a, errors="coerce")).dropna().to_numpy(dtype=float)
    if not len(d):
        return {"n": 0, "mean_diff": np.nan, "ci_lo": np.nan, "ci_hi": np.nan, "agree": np.nan}
    lo, hi = t_interval(d, level)
    return {"n": len(d), "mean_diff": float(d.mean()), "ci_lo": lo, "ci_hi": hi,
            "agree": float(np.mean(d == 0))}
