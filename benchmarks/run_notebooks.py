"""Execute notebooks headless with nbclient and time each one (used by ``benchmarks/gpu_session.sh notebooks``).

``python -m benchmarks.run_notebooks --out DIR notebooks/00_quickstart.ipynb ...`` runs each notebook in a
fresh ``python3`` kernel (parameters from the environment, as ``make reports`` does), writes the executed
copy to ``DIR`` and prints one line per notebook with its wall time; a failing cell is printed with its
traceback and the run goes on to the next notebook; ``notebook_times.json`` is rewritten after each one. Exit status 1 if any notebook failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def run_one(path: Path, out: Path, timeout: int) -> dict:
    """Execute ``path`` in a fresh kernel; return ``{"notebook", "wall_s", "ok", "error"}``."""
    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    error = ""
    try:
        nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}}).execute()
    except nbclient.exceptions.CellExecutionError as e:
        error = str(e)[-3000:]
    wall = time.perf_counter() - t0
    nbformat.write(nb, out / path.name)
    return {"notebook": path.name, "wall_s": round(wall, 1), "ok": not error, "error": error}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for p in args.notebooks:
        r = run_one(p, args.out, args.timeout)
        rows.append(r)
        print(f"{r['notebook']}: {'ok' if r['ok'] else 'FAILED'} in {r['wall_s']} s", flush=True)
        if r["error"]:
            print(r["error"], flush=True)
        total = sum(r["wall_s"] for r in rows)  # written after each notebook: a cut run keeps what it did
        (args.out / "notebook_times.json").write_text(json.dumps({"notebooks": rows, "total_s": total}, indent=2))
    print(f"total {total:.1f} s for {len(rows)} notebooks", flush=True)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
