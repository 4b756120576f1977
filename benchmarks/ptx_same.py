r"""Does a source change to the CUDA W4A16 library (``workbench/kernels/csrc/w4a16_mma.cu``) change its code? A CPU
check for refactors made without a GPU: compile the file at a git revision and in the working tree to PTX (``nvcc
-ptx``, the flags of :func:`workbench.kernels.w4a16_mma.build` less ``-shared``), for the default build (sm_90) and the
wgmma build (sm_90a, ``-DWB_WGMMA``), and compare them after removing what only names the file: comments, ``.file``
/ ``.loc`` lines, and the anonymous namespace's per-file tag (``_GLOBAL__N__<hash>_<file>_<hash>`` and its length
prefix in mangled names). Equal PTX means equal machine code, since ``ptxas`` is deterministic for a given PTX and
flag set; so a refactor that passes needs no new GPU run. Where the texts differ, the kernels (``.entry`` blocks) are
compared one by one (branch labels without the function's ordinal): same, changed, only in the base, only in the tree. ``--tree-sub PATTERN REPL`` applies a
regular-expression substitution to the tree's PTX first, e.g. to drop a template argument added with its default
value from the mangled names (``'(w4a16_wg_kernelI\w*?ELi4E)Lb0E' '\1'``), so that the kernels it leaves alone are
recognised as the same.

Run: ``python -m benchmarks.ptx_same --base HEAD [--arch 90 --arch 90a] [--tree-sub PATTERN REPL] [--out JSON]``; about
a minute a build on two cores. Exits 0 when every build is equal, 1 otherwise (the first differing lines printed), 2
without nvcc.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from workbench.kernels import w4a16_mma as mm

REL = "workbench/kernels/csrc/w4a16_mma.cu"
FLAGS = {"90": ["-arch=sm_90"], "90a": ["-arch=sm_90a", "-DWB_WGMMA"]}


def normalize(ptx: str) -> str:
    """PTX text less what depends only on the source file's name or path (see the module docstring)."""
    ptx = re.sub(r"_GLOBAL__N__[0-9a-f]+_\w+?_[0-9a-f]{8}", "ANON", ptx)
    ptx = re.sub(r"([_Z]N)[0-9]+ANON", r"\1ANON", ptx)
    ptx = re.sub(r"^\s*(//.*|\.loc\b.*|\.file\b.*)$", "", ptx, flags=re.MULTILINE)
    # branch labels carry the function's ordinal in the file ($L__BB<ordinal>_<block>): a kernel added before
    # another renumbers the other's labels
    ptx = re.sub(r"\$L__BB\d+_", "$L__BB_", ptx)
    return ptx


def entries(ptx: str) -> dict:
    """The kernels of a (normalized) PTX text: mangled name -> its ``.entry`` block, up to the next one."""
    parts = re.split(r"(?m)^(?=(?:\.visible\s+)?\.entry\s)", ptx)
    return {re.match(r"(?:\.visible\s+)?\.entry\s+(\S+)\(", p).group(1): p for p in parts[1:]}


def compare_entries(base: str, tree: str) -> dict:
    """Kernel by kernel: ``same``, ``changed`` (names in both, blocks differ), ``only_base``, ``only_tree``."""
    b, t = entries(base), entries(tree)
    return {"same": sorted(n for n in b if n in t and b[n] == t[n]),
            "changed": sorted(n for n in b if n in t and b[n] != t[n]),
            "only_base": sorted(n for n in b if n not in t), "only_tree": sorted(n for n in t if n not in b)}


def compile_ptx(nvcc: str, source: str, arch: str, tmp: Path, tag: str) -> str:
    """PTX of ``source`` (the .cu text) for ``arch`` ("90" or "90a"); the file is written as ``<tmp>/<tag>/w4a16_mma.cu``
    so both sides carry the same file name. Raises RuntimeError with nvcc's output when it fails."""
    d = tmp / tag
    d.mkdir(parents=True, exist_ok=True)
    cu, out = d / "w4a16_mma.cu", d / f"{arch}.ptx"
    cu.write_text(source)
    cmd = [nvcc, "-ptx", "-O3", "-std=c++17", *FLAGS[arch], "-o", str(out), str(cu)]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode:
        raise RuntimeError(f"nvcc failed ({' '.join(cmd)}):\n{r.stderr[-2000:]}")
    return out.read_text()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="HEAD", help="git revision to compare the working tree's file against")
    ap.add_argument("--arch", action="append", choices=sorted(FLAGS), help="builds to compare (default both)")
    ap.add_argument("--tree-sub", nargs=2, action="append", default=[], metavar=("PATTERN", "REPL"),
                    help="re.sub on the tree's PTX before comparing (repeatable)")
    ap.add_argument("--out", type=Path, help="write a JSON summary here")
    a = ap.parse_args(argv)
    nvcc = mm._nvcc()
    if nvcc is None:
        print("nvcc not found (PATH, $CUDA_HOME/bin): install the CUDA toolkit", file=sys.stderr)
        return 2
    root = Path(__file__).resolve().parents[1]
    base_src = subprocess.run(["git", "show", f"{a.base}:{REL}"], cwd=root, capture_output=True, text=True,
                              check=True).stdout
    head_src = (root / REL).read_text()
    rev = subprocess.run(["git", "rev-parse", a.base], cwd=root, capture_output=True, text=True,
                         check=True).stdout.strip()
    summary = {"base": rev, "base_sha256": hashlib.sha256(base_src.encode()).hexdigest(),
               "tree_sha256": hashlib.sha256(head_src.encode()).hexdigest(), "nvcc": subprocess.run(
                   [nvcc, "--version"], capture_output=True, text=True, check=False).stdout.strip().splitlines()[-1],
               "tree_sub": a.tree_sub, "builds": {}}
    same_all = True
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for arch in a.arch or sorted(FLAGS):
            b = normalize(compile_ptx(nvcc, base_src, arch, tmp, "base"))
            h = normalize(compile_ptx(nvcc, head_src, arch, tmp, "tree"))
            for pat, repl in a.tree_sub:
                h = re.sub(pat, repl, h)
            same = b == h
            same_all &= same
            kern = compare_entries(b, h)
            n_tree = len(kern["same"]) + len(kern["changed"]) + len(kern["only_tree"])
            summary["builds"][arch] = {"same": same, "entries": n_tree, "lines": h.count("\n"),
                                       "ptx_sha256": hashlib.sha256(h.encode()).hexdigest(),
                                       "kernels_same": len(kern["same"]),
                                       **{k: v for k, v in kern.items() if k != "same"}}
            print(f"sm_{arch}: {'same' if same else 'DIFFERENT'} PTX ({n_tree} kernels, {h.count(chr(10))} lines)")
            if not same:
                print("  kernels: " + ", ".join(f"{len(v)} {k}" for k, v in kern.items()))
                for k in ("changed", "only_base", "only_tree"):
                    for name in kern[k][:20]:
                        print(f"    {k}: {name}")
                bl, hl = b.splitlines(), h.splitlines()
                i = next((k for k, (x, y) in enumerate(zip(bl, hl)) if x != y), min(len(bl), len(hl)))
                print(f"  first difference at normalized line {i}:\n  base: {bl[i:i + 1]}\n  tree: {hl[i:i + 1]}")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(summary, indent=1) + "\n")
    return 0 if same_all else 1


if __name__ == "__main__":
    sys.exit(main())
