"""W4A16 against FP8 on one model: the takeaway notebook 01 prints, computed from the sweep's rows.

The two are compared by :func:`workbench.quant.verdict.compare_points` (paired KL over the shared evaluation
windows, MMLU from Wilson intervals) and by their measured weight bytes; the sentence names a winner on a metric
only where the 95% interval of the difference excludes zero, and says "no difference" otherwise. Speed is not in
this sentence: the CPU sweep times no FP8 kernel (``benchmarks/fp8_speed.py`` measures it on a GPU).
"""

from __future__ import annotations

import pandas as pd

from workbench.quant.verdict import compare_points

__all__ = ["FP8_LABELS", "W4A16_LABELS", "fp8_vs_w4a16", "pareto_front"]

# the W4A16 points the takeaway picks from, best-calibrated first (QuantConfig labels of the study's grids)
W4A16_LABELS = ("GPTQ W4 g128 asym", "AWQ W4 g128 asym", "RTN W4 g128 asym", "RTN W4 g128 sym")
FP8_LABELS = ("FP8_DYNAMIC (W8A8 e4m3)", "FP8 (W8A8 e4m3)", "FP8_BLOCK (W8A8 e4m3)")


def fp8_vs_w4a16(grid: pd.DataFrame, w4a16: str | None = None, fp8: str | None = None) -> dict:
    """Compare a W4A16 row and an FP8 row of a quantization sweep ``grid`` (``workbench.studies.quant.run(...).grid``).

    Args: ``w4a16`` / ``fp8``: row labels (default the first of :data:`W4A16_LABELS` / :data:`FP8_LABELS` present).
    Returns ``{"w4a16", "fp8", "kl": QuantVerdict, "mmlu": QuantVerdict | None, "memory_ratio"
    (FP8 weight bytes / W4A16's), "text"}``; ``text`` is the takeaway, every number in it computed here.
    Raises ``ValueError`` when the grid has no W4A16 or no FP8 row (names the labels it looked for)."""
    have = set(grid["label"])
    w4 = w4a16 or next((x for x in W4A16_LABELS if x in have), None)
    f8 = fp8 or next((x for x in FP8_LABELS if x in have), None)
    if w4 not in have or f8 not in have:
        raise ValueError(f"fp8_vs_w4a16 needs a W4A16 row (one of {W4A16_LABELS}) and an FP8 row (one of {FP8_LABELS}); "
                         f"the grid has {sorted(have)}: run the study with float_grid='demo_cpu' or 'all'")
    kl = compare_points(grid, f8, w4, "kl_mean")
    mm = compare_points(grid, f8, w4, "mmlu_acc") if "mmlu_acc" in grid and grid["mmlu_acc"].notna().all() else None
    rw, rf = grid[grid["label"] == w4].iloc[-1], grid[grid["label"] == f8].iloc[-1]
    ratio = float(rf["weight_bytes"] / rw["weight_bytes"])
    head = (f"{f8} against {w4}: weights {rf['weight_bytes'] / 2**20:,.0f} vs {rw['weight_bytes'] / 2**20:,.0f} MiB "
            f"({ratio:.2f}x the W4A16 bytes).")
    parts = [head, f"KL to the full-precision model: {kl.text}."]
    if mm is not None:
        parts.append(f"MMLU ({int(rf['mmlu_n'])} questions): {mm.text}.")
    return {"w4a16": w4, "fp8": f8, "kl": kl, "mmlu": mm, "memory_ratio": ratio, "text": " ".join(parts)}


def pareto_front(grid: pd.DataFrame, x: str = "weight_bytes", y: str = "kl_mean") -> pd.DataFrame:
    """The rows of ``grid`` no other row beats on both ``x`` and ``y`` (both lower is better; e.g. stored bytes and
    KL), sorted by ``x``: the memory-vs-quality front, integer and float formats alike (the full-precision row is on
    it, at KL 0). A row is dominated when another has ``x <=`` and ``y <=`` with one strict. Rows with a missing
    ``x`` or ``y`` are left out. Raises ``ValueError`` for a column the grid lacks."""
    for c in (x, y):
        if c not in grid:
            raise ValueError(f"pareto_front: the grid has no column {c!r}")
    d = grid.dropna(subset=[x, y]).sort_values([x, y])
    keep, best = [], float("inf")
    for i, v in zip(d.index, d[y]):
        if v < best:  # sorted by x (then y): a row is on the front iff its y beats every smaller-x row's
            keep.append(i)
            best = v
    return d.loc[keep]
