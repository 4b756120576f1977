"""Which one-row W4A16 setting decoded faster at batch 1 in a ``check_w4_onerow`` JSON: prints ``1`` (the fused
GEMV), ``0`` (unfused) or ``auto`` (no A/B to go by) for ``--model``, for ``WORKBENCH_INT4_ONE_ROW_FUSED`` (:data:`workbench.engine.dispatch.
INT4_ONE_ROW_FUSED`), so that a chain of device calls runs the rest with the faster one:

    WORKBENCH_INT4_ONE_ROW_FUSED=$(python3 -m benchmarks.pick_one_row /tmp/w4.json --model smollm2-135m) ...

The comparison is the JSON's own A/B (both variants in one process, fresh engines, CUDA graphs); ``auto`` (the
default of :data:`workbench.engine.dispatch.INT4_ONE_ROW_FUSED`) when the file or the model's rows are missing."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def pick(doc: dict, model: str) -> str:
    """``"1"`` if the fused variant (prologues inside the GEMV) measured fewer ms/token than the unfused one, ``"0"``
    if not, ``"auto"`` (the default) where ``doc`` has no such pair for ``model``."""
    ms = {r["impl"].split("_", 2)[-1]: r["ms"] for r in doc.get("decode", [])
          if r["model"] == model and r["impl"].startswith("w4a16_g")}  # "w4a16_g64_fused" -> "fused"
    if "unfused" not in ms or "fused" not in ms:
        return "auto"
    return "1" if ms["fused"] < ms["unfused"] else "0"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json")
    ap.add_argument("--model", required=True)
    a = ap.parse_args(argv)
    try:
        doc = json.loads(Path(a.json).read_text())
    except (OSError, ValueError) as e:
        print(f"pick_one_row: {e}; keeping the default", file=sys.stderr)
        doc = {}
    print(pick(doc, a.model))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
