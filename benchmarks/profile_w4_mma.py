"""Launches for an ``ncu`` profile of the W4A16 MMA kernel (``workbench.kernels.w4a16_mma``) on one Qwen2-7B matmul:
``REPS`` launches at each row count of ``--ms`` with a fixed configuration (no tuning, so every launch is the
kernel under study). Run under ncu on the H200, e.g.::

    ncu --clock-control none --kernel-name regex:w4a16_mma --launch-skip 3 --launch-count 1 \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \\
        python3 -m benchmarks.profile_w4_mma --shape gate_up --ms 1
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.check_w4_mma import LAYERS, weight
from workbench.kernels import w4a16_mma as mm

REPS = 5


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="qwen2-7b")
    p.add_argument("--shape", default="gate_up")
    p.add_argument("--ms", default="1")
    p.add_argument("--cfg", default="2,2,1,4", help="RT,DEPTH,XS,KS")
    a = p.parse_args()
    n, k, g = LAYERS[a.model][a.shape]
    _q, qw, s, z = weight(n, k, g, torch.bfloat16, torch.device("cuda"))
    cfg = tuple(int(v) for v in a.cfg.split(","))
    for m in (int(v) for v in a.ms.split(",")):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        for _ in range(REPS):
            mm.gemm(x, qw, s, z, g, n, None, cfg)
    torch.cuda.synchronize()
    print("done", n, k, g, cfg)


if __name__ == "__main__":
    main()
