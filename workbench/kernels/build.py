"""Prebuild the W4A16 CUDA library: ``python -m workbench.kernels.build [--arch 90]``.

An INT4 model on a GPU compiles ``csrc/w4a16_mma.cu`` at its first use (printed, about 80 s on 16 cores); this
does it ahead of time, into the cache :func:`workbench.kernels.w4a16_mma.build` reads (``$WORKBENCH_CACHE/kernels``
or ``~/.cache/workbench/kernels``), and prints the path. A bf16 model never compiles it, but uses the dense MMA
kernel where a prebuilt library is there and a timing picks it (``Engine.route_table`` says so).
"""

from __future__ import annotations

import argparse

import torch

from workbench.kernels import w4a16_mma


def main(argv=None) -> int:
    """Build for ``--arch`` (default: the current GPU's compute capability, e.g. ``90``). Returns 0, or 1 with the
    reason printed where nvcc is missing or the build fails."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", help="compute capability without the dot, e.g. 90 (default: this GPU's)")
    args = ap.parse_args(argv)
    arch = args.arch
    if arch is None:
        if not torch.cuda.is_available():
            print("no CUDA device: pass --arch (e.g. 90 for H100 / H200)")
            return 1
        cc = torch.cuda.get_device_capability()
        arch = f"{cc[0]}{cc[1]}"
    try:
        print(w4a16_mma.build(arch))
    except RuntimeError as e:
        print(f"build failed: {e}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
