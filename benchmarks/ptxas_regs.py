"""Registers, spills and shared memory per kernel from an ``nvcc -Xptxas -v`` log (plain or .gz): the CPU-side
check of a kernel change's register pressure, before any GPU run.

Run: ``python -m benchmarks.ptxas_regs LOG [--match wg_kernel] [--out JSON]``; prints one line per kernel (names
demangled with ``c++filt`` where it exists). The log comes from the build line of the results README with
``-Xptxas -v`` added, e.g. ``nvcc -O3 -shared -Xcompiler -fPIC -std=c++17 -gencode=arch=compute_90a,code=sm_90a
-DWB_WGMMA -Xptxas -v -o .build/w4wg.so workbench/kernels/csrc/w4a16_mma.cu 2> LOG``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path


def parse(text: str) -> list:
    """``[{"kernel", "registers", "spill_stores", "spill_loads", "smem_bytes"}]`` in log order, one per
    ``Compiling entry function`` block that reports its registers (ptxas's "Used N registers" line)."""
    out, cur, spill = [], None, (0, 0)
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            cur, spill = m.group(1), (0, 0)
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and cur:
            spill = (int(m.group(1)), int(m.group(2)))
        m = re.search(r"Used (\d+) registers", line)
        if m and cur:
            smem = re.search(r"(\d+) bytes smem", line)
            out.append({"kernel": cur, "registers": int(m.group(1)), "spill_stores": spill[0],
                        "spill_loads": spill[1], "smem_bytes": int(smem.group(1)) if smem else 0})
            cur = None
    return out


def demangle(names: list) -> list:
    """Names through ``c++filt`` (unchanged where it is missing)."""
    if not names or shutil.which("c++filt") is None:
        return list(names)
    r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=False)
    got = r.stdout.splitlines()
    return got if len(got) == len(names) else list(names)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--match", default="", help="keep kernels whose mangled name contains this")
    ap.add_argument("--out", type=Path, help="write the rows as JSON here")
    a = ap.parse_args(argv)
    raw = a.log.read_bytes()
    text = (gzip.decompress(raw) if a.log.suffix == ".gz" else raw).decode(errors="replace")
    rows = [r for r in parse(text) if a.match in r["kernel"]]
    for r, name in zip(rows, demangle([r["kernel"] for r in rows])):
        r["name"] = name
        print(f"{r['registers']:4d} regs  spill {r['spill_stores']:4d}/{r['spill_loads']:<4d}  {name}")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({"log": str(a.log), "match": a.match, "kernels": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
