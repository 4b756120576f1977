"""W4A16 GEMM for 1..64 activation rows on tensor cores, in hand-written CUDA (``csrc/w4a16_mma.cu``):
``out[M, N] = x[M, K] @ w_hat[N, K].T (+ residual)``, ``w_hat = (q - zero) * scale`` per group of ``G`` columns,
float32 accumulation, one launch; and a dense bf16 / fp16 GEMM for 2..8 rows (:func:`dense_gemm`).

The design is Marlin's (Frantar et al. 2024, arXiv 2408.11743, sec. 4) cut down to decode sizes: swap AB (a 16-row
tile of the weight is the A operand of ``mma.sync.m16n8k16``, the activations B), the weights kept in
:func:`workbench.kernels.int4_layout.pack_int4_gemv`'s layout (the Triton kernels read the same), dequantization by
``prmt`` + ``lop3`` under bf16's exponent of 128 (Kim et al. 2022, arXiv 2211.10017, sec. 4.1), split-K inside the
CTA summed in warp order (deterministic), a "wide" kernel for 17..64 rows whose warps share staged activations, and
a TC kernel (activations as the A operand, ``ldmatrix``). K split across CTAs sums float32 partials in split order
in the CTA that arrives last at its tile's counter (the serial fixup of stream-K, Osama et al. 2023, arXiv
2301.03598). A configuration is ``(MT, RT, KS, DEPTH)`` / ``(RT, DEPTH, XS, W, SPLIT)``; :func:`tune` times the
compiled variants per shape and row class (:data:`ROW_CLASSES`).

Which rows the engine sends here: :mod:`workbench.engine.routing` (``w4a16-mma``, ``dense-mma``). The library is
compiled with ``nvcc`` for the GPU's architecture when an INT4 layer first needs it (printed, with the time taken;
cached under ``$WORKBENCH_CACHE`` or ``~/.cache/workbench`` keyed by the source, flags and compiler), or ahead of
time by ``python -m workbench.kernels.build``; ``WORKBENCH_W4MMA_SO`` names a prebuilt one. Where it cannot be
built (no ``nvcc``, compute capability < 8.0) :func:`available` is False and the Triton kernels run. The kernel is
checked against :func:`reference` on the GPU (``tests/engine/test_w4a16_mma.py``).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import torch

from workbench.kernels.int4_layout import unpack_int4_gemv

SRC = Path(__file__).with_name("csrc") / "w4a16_mma.cu"
ROWS_MAX = 64
GROUPS = (64, 128, 256)
KS_CHOICES = (1, 2, 4, 8, 16)  # warps per CTA splitting K
WIDE = 3  # XS >= WIDE: the wide kernel, (RT, DEPTH, XS, W, SPLIT) configurations; XS - WIDE is its WS field,
WIDE_PRESCALED = 2  # whose bit 0 puts the weights through shared memory and bit 1 prescales (w_hat in x's dtype)
WIDE_WARPS = (4, 8)  # warps per CTA (adjacent 16 RT-row tiles of N) of the wide kernel
WIDE_TC = 4  # XS - WIDE bit 2: the TC kernel (activations as the MMA's A operand, ldmatrix; prescaled; see the source)
# The TC kernel's extra CTA widths: its grid is N / (16 RT W) CTAs, and at 2 CTAs an SM Qwen2-7B's gate_up at 64 rows
# was 296 CTAs for 264 slots (ncu: SMs active 56% of the elapsed cycles, a second wave of 32 CTAs); W = 3 with RT = 2
# (3 CTAs an SM by registers) is 395 CTAs for 396 slots. Measured: no gain (benchmarks/results/h200_2026-12-04c/
# tc2_layers.json); they stay as configurations the tuner times.
TC_WARPS = (2, 3, 6)
WIDE_TC_OCC = 8  # XS - WIDE bit 3 (with bit 2): the TC kernel under 128-thread launch bounds, 3 CTAs an SM (W <= 4)
WIDE_SPLITS = (1, 2, 4, 8)  # CTAs splitting K (partials in a float32 workspace, summed in split order)
SEM_LEN = 16384  # column tiles a split launch can count (one int32 counter each, per device)
ABI = 3  # the library's launch signature (wb_w4mma_abi; 2: the act argument of the SwiGLU epilogue; 3: ks_max takes XS)
# Programmatic dependent launch for the INT4 launches of at most this many 8-row tiles (MT); larger tiles launch plain.
# An early-launched CTA waits at griddepcontrol.wait holding its registers and shared memory, which the previous
# kernel's later waves need (the same trade as fused._small_pdl). 8: every launch; gemm reads it at every launch,
# and Engine._capture sets it for a capture (Engine._pdl_max_mt).
PDL_MAX_MT = 8
ACTS = {"none": 0, "swiglu": 1}  # output epilogues: none, or SwiGLU on a [gate | up] weight (see gemm)
_MAGIC = {torch.bfloat16: (0x43004300, 128.0), torch.float16: (0x64006400, 1024.0)}
_BEST: dict = {}
_STATE: dict = {}


def _cache_dir() -> Path:
    root = os.environ.get("WORKBENCH_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "workbench")
    return Path(root) / "kernels"


def _nvcc() -> str | None:
    for cand in (shutil.which("nvcc"), os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")):
        if cand and os.path.exists(cand):
            return cand
    return None


def _arch_flags(arch: str) -> list:
    """nvcc flags for compute capability ``arch`` ("90", "89", ...)."""
    return [f"-gencode=arch=compute_{arch},code=sm_{arch}"]


def library_path(arch: str, nvcc: str | None = None) -> Path | None:
    """Where :func:`build` puts (or put) the library for ``arch``: the cache file named by the source, the nvcc
    flags and the compiler version; None without nvcc."""
    nvcc = nvcc or _nvcc()
    if nvcc is None:
        return None
    ver = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False).stdout
    tag = hashlib.sha256(SRC.read_bytes() + " ".join(_arch_flags(arch)).encode() + ver.encode()).hexdigest()[:16]
    return _cache_dir() / f"w4a16_mma_sm{arch}_{tag}.so"


def build(arch: str, out: Path | None = None, nvcc: str | None = None) -> Path:
    """Compile ``csrc/w4a16_mma.cu`` into a shared library for ``arch`` (e.g. ``"90"``) and return its path;
    a library already built from the same source, architecture and compiler is reused. Prints that it is
    compiling and how long it took (about 80 s on 16 cores, 4-5 min on 2). Raises ``RuntimeError``
    when ``nvcc`` is missing or the compilation fails (its output in the message)."""
    nvcc = nvcc or _nvcc()
    if nvcc is None:
        raise RuntimeError("nvcc not found (PATH, $CUDA_HOME/bin): install the CUDA toolkit, or set "
                           "WORKBENCH_W4MMA_SO to a prebuilt library, or disable the kernel "
                           "(WORKBENCH_DISABLED_KERNELS=w4a16-mma,dense-mma)")
    out = out or library_path(arch, nvcc)
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    cmd = [nvcc, "-O3", "-shared", "-Xcompiler", "-fPIC", "-std=c++17"] + _arch_flags(arch) + ["-o", tmp, str(SRC)]
    print(f"workbench: compiling the W4A16 CUDA library for sm_{arch} into {out} (once per source and GPU "
          "architecture; prebuild with `python -m workbench.kernels.build`)...", flush=True)
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode:
        os.unlink(tmp)
        raise RuntimeError(f"nvcc failed ({' '.join(cmd)}):\n{r.stderr[-2000:]}")
    os.replace(tmp, out)
    print(f"workbench: compiled the W4A16 CUDA library in {time.perf_counter() - t0:.0f} s", flush=True)
    return out


def _load(path: str) -> ctypes.CDLL:
    """Load a built library; ``AttributeError`` for one built from another revision of the source (missing
    symbols, or another :data:`ABI`), which the caller then rebuilds."""
    lib = ctypes.CDLL(path)
    lib.wb_w4mma_abi.restype = ctypes.c_int
    if lib.wb_w4mma_abi() != ABI:
        raise AttributeError(f"{path}: launch ABI {lib.wb_w4mma_abi()}, this source has {ABI}: rebuild it")
    lib.wb_w4mma_launch.restype = ctypes.c_int
    lib.wb_w4mma_launch.argtypes = ([ctypes.c_int] * 7 + [ctypes.c_void_p, ctypes.c_int] + [ctypes.c_void_p] * 5
                                    + [ctypes.c_int] * 5 + [ctypes.c_void_p])
    lib.wb_w4mma_variants.restype = ctypes.c_char_p
    lib.wb_w4mma_wide_launch.restype = ctypes.c_int
    lib.wb_w4mma_wide_launch.argtypes = ([ctypes.c_int] * 8 + [ctypes.c_void_p, ctypes.c_int] + [ctypes.c_void_p] * 5
                                         + [ctypes.c_int] * 4 + [ctypes.c_void_p] * 2 + [ctypes.c_int] * 2
                                         + [ctypes.c_void_p])
    lib.wb_w4mma_wide_variants.restype = ctypes.c_char_p
    lib.wb_dense_mma_launch.restype = ctypes.c_int
    lib.wb_dense_mma_launch.argtypes = ([ctypes.c_int] * 5 + [ctypes.c_void_p, ctypes.c_int] + [ctypes.c_void_p] * 3
                                        + [ctypes.c_int] * 4 + [ctypes.c_void_p])
    lib.wb_dense_mma_variants.restype = ctypes.c_char_p
    return lib


def _lib(device: torch.device, build_it: bool = True):
    """The loaded library for ``device``'s architecture, or None (the reason in ``_STATE["why"]``). With
    ``build_it`` False, only a prebuilt library (``WORKBENCH_W4MMA_SO``, or the cache file :func:`build` wrote) is
    loaded, and None is not remembered (a later call may build)."""
    cc = torch.cuda.get_device_capability(device)
    arch = f"{cc[0]}{cc[1]}"
    if arch in _STATE:
        return _STATE[arch]
    lib = None
    try:
        if cc < (8, 0):
            raise RuntimeError(f"compute capability {cc[0]}.{cc[1]} < 8.0 (bf16 mma.sync)")
        pre = os.environ.get("WORKBENCH_W4MMA_SO")
        try:
            lib = _load(pre) if pre else None
        except (OSError, AttributeError):  # built on another system image, or not this library: build here
            lib = None
        if lib is None and not build_it:
            path = library_path(arch)
            if path is None or not path.exists():
                _STATE["why"] = "not built yet (python -m workbench.kernels.build)"
                return None
            lib = _load(str(path))
        lib = lib or _load(str(build(arch)))
        _STATE["why"] = ""
    except (RuntimeError, OSError, AttributeError) as e:  # AttributeError: a library without our symbols
        _STATE["why"] = str(e)
    _STATE[arch] = lib
    return lib


def available(device, build: bool = True) -> bool:
    """The kernel can run on ``device``: CUDA (not ROCm) and the library built
    (or prebuilt) and loaded. With ``build`` (an INT4 layer needs it) the first call may compile it (about 80 s on
    16 cores, printed); without, only a library built before counts. :func:`why_unavailable` says why not."""
    device = torch.device(device)
    if device.type != "cuda" or torch.version.hip is not None:
        _STATE["why"] = "not a CUDA device" if device.type != "cuda" else "ROCm (the library is CUDA C++)"
        return False
    return _lib(device, build) is not None


def why_unavailable() -> str:
    """Why the last :func:`available` call said no ("" if it said yes)."""
    return _STATE.get("why", "")


def _tuples(listing: bytes) -> tuple:
    """A library's variant listing (``b"a,b,c;d,e,f;"``) as integer tuples."""
    return tuple(tuple(int(v) for v in item.split(",")) for item in listing.decode().split(";") if item)


@functools.cache
def variants(device_index: int = 0) -> tuple:
    """``(G, MT, RT, DEPTH, XS)`` tuples the loaded library holds (read from the library)."""
    lib = _lib(torch.device("cuda", device_index))
    if lib is None:
        return ()
    out = _tuples(lib.wb_w4mma_variants())
    out += tuple((g, mt, rt, depth, WIDE + wsm) for g, mt, rt, depth, wsm in _tuples(lib.wb_w4mma_wide_variants()))
    lib.wb_w4mma_ks_max.restype = ctypes.c_int
    for _g, mt, rt, _d, xs in out:  # the Python bound must be the kernel's
        if xs >= WIDE:
            continue
        if lib.wb_w4mma_ks_max(mt, rt, xs) != ks_max(mt, rt, xs):
            raise RuntimeError(f"ks_max({mt}, {rt}, {xs}) = {ks_max(mt, rt, xs)} but the library says "
                               f"{lib.wb_w4mma_ks_max(mt, rt, xs)}: rebuild it from this source")
    return out


def m_tiles(m: int) -> int:
    """Activation tiles of 8 rows the kernel is compiled for: 1, 2, 4 or 8 (M <= 8, 16, 32, 64)."""
    if not 1 <= m <= ROWS_MAX:
        raise ValueError(f"the W4A16 MMA kernel takes 1..{ROWS_MAX} rows, got {m}")
    mt = 1
    while 8 * mt < m:
        mt *= 2
    return mt


def split_workspace_floats(m: int, n: int, rt: int, w: int, split: int) -> int:
    """float32 elements of a split wide / TC / WG launch's workspace: ``split`` partials of ``Mpad x Npad``, ``Mpad = 8
    m_tiles(m)`` rows and ``Npad`` = the launch's column tiles (``16 RT W`` columns each) times their width. Each
    thread of column tile ``b`` stores its ``4 RT MT`` accumulators as float4 ``j`` at ``((u tiles + b) RT MT + j)
    blockDim + threadIdx`` of split ``u`` (``mine + sp * ustep + ...`` in each kernel's fixup), which covers exactly
    this many floats (``tests/engine/test_w4a16_mma.py`` checks the map). Raises ``ValueError`` for ``m`` outside
    1..64 (:func:`m_tiles`)."""
    width = 16 * rt * w
    return split * 8 * m_tiles(m) * (-(-n // width) * width)


def supported(n: int, k: int, group: int, dtype: torch.dtype, zeros: torch.Tensor | None = None) -> bool:
    """Whether :func:`gemm` takes this weight: bf16 / fp16 activations, ``group`` in :data:`GROUPS` dividing
    ``k``, ``n`` a multiple of 16, and (if given) integer ``zeros`` with ``|zero| < 128`` (bf16) or ``< 1024``
    (fp16), so that ``base + zero`` is exact."""
    if dtype not in _MAGIC or group not in GROUPS or k % group or n % 16 or n < 16:
        return False
    return zeros is None or (bool(torch.equal(zeros, zeros.round())) and float(zeros.abs().max()) < _MAGIC[dtype][1])


def ks_max(mt: int, rt: int, xs: int = 0) -> int:
    """The most warps per CTA (``KS``) a variant takes: 16, or 8 where a warp holds >= 4 fragment tiles, and at most
    ``64 / (MT * RT)`` (its per-warp reduction slices fit 32 KB); ``KsMax`` in the source. The cp.async kernel
    (``xs == 2``, weights in shared memory) takes 16 at ``MT = RT = 2`` too (``KsMaxAsync``)."""
    if xs == 2 and mt == 2 and rt == 2:
        return 16
    return min(8 if mt * rt >= 4 else 16, 64 // (mt * rt))


def configs(n: int, k: int, m: int, group: int, device_index: int = 0) -> list:
    """Launch configurations for ``m`` rows: every compiled variant of this group and ``MT``; ``(RT, DEPTH, XS,
    KS)`` for the split kernels, with ``KS`` warps per CTA up to :func:`ks_max` and such that each warp gets at least
    one group; ``(RT, DEPTH, WIDE, W, SPLIT)`` for the wide kernel (:data:`WIDE_WARPS`, :data:`WIDE_SPLITS`, each
    split at least one group, at most ``16 * 132`` CTAs)."""
    return configs_for(variants(device_index), n, k, m, group)


def configs_for(vs, n: int, k: int, m: int, group: int) -> list:
    """:func:`configs` over the ``(G, MT, RT, DEPTH, XS)`` variants ``vs`` (e.g. :func:`source_variants` on a machine
    without the library)."""
    mt = m_tiles(m)
    ng = k // group
    out = []
    for g, vmt, rt, depth, xs in vs:
        if g != group or vmt != mt:
            continue
        if xs >= WIDE:
            ws = xs - WIDE
            warps = WIDE_WARPS + (TC_WARPS if ws & WIDE_TC else ())
            for w in (tuple(w for w in warps if w <= 4) if ws & WIDE_TC_OCC else warps):
                tiles = -(-n // (16 * rt * w))
                out += [(rt, depth, xs, w, sp) for sp in WIDE_SPLITS if sp <= ng and tiles * sp <= 16 * 132]
            continue
        for ks in KS_CHOICES:
            if ks <= ng and ks <= ks_max(mt, rt, xs):
                out.append((rt, depth, xs, ks))
    return out


def default_cfg(n: int, k: int, m: int, group: int, sms: int = 132) -> tuple:
    """An untuned configuration: one 16-row tile per warp, two groups in flight, activations prefetched where
    that variant exists (the list in the source, :func:`source_variants`), and ``KS`` warps per CTA so that about
    ``24 * sms`` warps (``n / 16 * KS``) run."""
    mt = m_tiles(m)
    have = {v[1:] for v in variants() if v[0] == group}  # what the loaded library holds
    xs = 1 if (mt, 1, 2, 1) in have else 0
    ks = 1
    while (n // 16) * ks < 24 * sms and 2 * ks <= ks_max(mt, 1) and 2 * ks <= k // group:
        ks *= 2
    return (1, 2, xs, ks)


# The row classes tuned apart (the largest row count of each): one row, 2..4, 5..8 (one 8-row tile, MT = 1), then one
# class per MT. With one class for 1..8 rows (tuned at one row) Qwen2-7B's down projection took [2, 2, 1, 16] in one
# run and [2, 2, 2, 16] in another, near-equal at one row, and the verify step of 5 rows cost 2.52 vs 2.30 ms
# (benchmarks/results/h200_2026-12-04/ab2_qwen_{a,b}.json).
ROW_CLASSES = (1, 4, 8, 16, 32, 64)


def row_class(m: int) -> int:
    """The tuning class of ``m`` rows: the smallest bound in :data:`ROW_CLASSES` >= ``m``. Raises ValueError outside
    1..:data:`ROWS_MAX`."""
    for bound in ROW_CLASSES:
        if 1 <= m <= bound:
            return bound
    raise ValueError(f"{m} rows: the MMA kernel takes 1..{ROWS_MAX}")


def key(n: int, k: int, m: int, group: int, dtype: torch.dtype, has_residual: bool) -> tuple:
    """The :data:`_BEST` key of a call: shape, row class (:func:`row_class`), group, dtype, residual epilogue."""
    return (n, k, row_class(m), group, dtype, bool(has_residual))


def gemm(x: torch.Tensor, qw: torch.Tensor, s: torch.Tensor, z: torch.Tensor, group: int, n: int,
         residual: torch.Tensor | None = None, cfg: tuple | None = None, out: torch.Tensor | None = None,
         act: str = "none"):
    """``[M, n] = x @ w_hat.T (+ residual)`` (see the module docstring), or with ``act="swiglu"`` on a gate_up
    weight (rows ``[gate | up]``, ``n = 2 I``) the SwiGLU activation ``[M, I] = silu(gate) * up`` as the engine's
    ``silu_mul`` computes it from the rounded matmul (Shazeer 2020, arXiv 2002.05202, eq. 6): each 16-row tile
    reads 8 gate rows and the 8 matching up rows (``wrow`` in the source), so a lane holds both values of an
    output and the ``[M, n]`` intermediate is never written.

    Args: ``x`` ``[M, K]`` bf16 or fp16 (1 <= M <= 64; rows contiguous, 16-byte aligned); ``qw`` ``[n, K // 8]``
    int32 from :func:`~workbench.kernels.int4_layout.pack_int4_gemv`; ``s``, ``z`` (scale, integer zero)
    ``[K // group, n]`` in x's dtype, contiguous; ``residual`` ``[M, n]`` in x's dtype or None; ``cfg = (RT, DEPTH,
    XS, KS)``, or ``(RT, DEPTH, WIDE, W, SPLIT)`` for the wide kernel (default: tuned for this call, else
    :func:`default_cfg`). A split wide launch takes a float32 workspace (:func:`split_workspace_floats`) from
    torch's allocator and the device's counters (:func:`_sem`): one stream at a time per device. Returns ``[M, n]`` (``[M, n // 2]`` for
    "swiglu") in x's dtype (or fills ``out``). Raises ``ValueError`` on arguments it does not take (an unknown
    ``act``, "swiglu" with a residual) and ``RuntimeError`` when the library is unavailable or the launch fails."""
    if x.dim() != 2 or x.dtype not in _MAGIC:
        raise ValueError(f"x must be [M, K] bf16 or fp16, got {tuple(x.shape)} {x.dtype}")
    if act not in ACTS:
        raise ValueError(f"act={act!r}: choose one of {sorted(ACTS)}")
    if act != "none" and residual is not None:
        raise ValueError("the SwiGLU epilogue takes no residual (add it in the down projection)")
    m, k = x.shape
    n_out = n // 2 if act == "swiglu" else n
    if qw.dtype != torch.int32 or qw.shape != (n, k // 8) or not qw.is_contiguous():
        raise ValueError(f"qw must be contiguous int32 [{n}, {k // 8}], got {tuple(qw.shape)} {qw.dtype}")
    if not supported(n, k, group, x.dtype):
        raise ValueError(f"N={n}, K={k}, group={group}, {x.dtype}: want bf16/fp16, group in {GROUPS} dividing K, "
                         "N a multiple of 16 (see supported())")
    ng = k // group
    for name, t in (("s", s), ("z", z)):
        if t.shape != (ng, n) or t.dtype != x.dtype or not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous {x.dtype} [{ng}, {n}], got {tuple(t.shape)} {t.dtype}")
    if x.stride(1) != 1 or (x.stride(0) * 2) % 16 or x.data_ptr() % 16:  # 8-16-byte activation loads
        x = x.clone(memory_format=torch.contiguous_format)
    if residual is not None and (residual.shape != (m, n) or residual.dtype != x.dtype
                                 or not residual.is_contiguous()):
        raise ValueError(f"residual must be contiguous {x.dtype} [{m}, {n}], got {tuple(residual.shape)}")
    if out is not None and (out.shape != (m, n_out) or out.dtype != x.dtype or not out.is_contiguous()):
        raise ValueError(f"out must be contiguous {x.dtype} [{m}, {n_out}], got {tuple(out.shape)} {out.dtype}")
    if qw.data_ptr() % 16:
        raise ValueError("qw must be 16-byte aligned (a fresh tensor, not an offset view)")
    lib = _lib(x.device) if x.device.type == "cuda" else None
    if lib is None:
        raise RuntimeError(f"the W4A16 MMA kernel is unavailable: {why_unavailable() or 'not a CUDA tensor'}")
    cfg = cfg or _BEST.get(key(n, k, m, group, x.dtype, residual is not None)) or default_cfg(n, k, m, group)
    rt, depth, xs, ks = cfg[:4]
    if out is None:
        out = torch.empty(m, n_out, dtype=x.dtype, device=x.device)
    from workbench.kernels.common import use_pdl

    stream = torch.cuda.current_stream(x.device).cuda_stream
    res_ptr = residual.data_ptr() if residual is not None else None
    pdl = int(use_pdl(x.device) and m_tiles(m) <= PDL_MAX_MT)
    with torch.cuda.device(x.device):  # the launch goes to the current device
        if xs >= WIDE:
            split = cfg[4] if len(cfg) > 4 else 1
            ws = (torch.empty(split_workspace_floats(m, n, rt, ks, split), dtype=torch.float32, device=x.device)
                  if split > 1 else None)
            sem = _sem(x.device) if split > 1 else None
            rc = lib.wb_w4mma_wide_launch(int(x.dtype == torch.bfloat16), group, m_tiles(m), rt, depth, xs - WIDE,
                                          ks, split,
                                          x.data_ptr(), x.stride(0), qw.data_ptr(), s.data_ptr(), z.data_ptr(),
                                          out.data_ptr(), res_ptr, m, n, k, ACTS[act],
                                          ws.data_ptr() if ws is not None else None,
                                          sem.data_ptr() if sem is not None else None, SEM_LEN, pdl, stream)
        else:
            rc = lib.wb_w4mma_launch(int(x.dtype == torch.bfloat16), group, m_tiles(m), rt, depth, xs, ks,
                                     x.data_ptr(), x.stride(0), qw.data_ptr(), s.data_ptr(), z.data_ptr(),
                                     out.data_ptr(), res_ptr, m, n, k, ACTS[act], pdl, stream)
    if rc:
        raise RuntimeError(f"W4A16 MMA launch failed (code {rc}; -1: no compiled variant for G={group}, "
                           f"MT={m_tiles(m)}, cfg={cfg})")
    return out


def prescaled(cfg: tuple | None) -> bool:
    """Whether a launch configuration rounds ``w_hat`` to x's dtype (the wide kernel's :data:`WIDE_PRESCALED`
    variants): its oracle is :func:`reference` with ``prescale=True``."""
    return bool(cfg) and cfg[2] >= WIDE and bool((cfg[2] - WIDE) & WIDE_PRESCALED)


def _sem(device: torch.device) -> torch.Tensor:
    """The wide kernel's arrival counters for ``device`` (:data:`SEM_LEN` int32 zeros, allocated once; each split
    launch leaves them zero). Allocated at the first split launch, which :meth:`tune` makes outside graph capture."""
    idx = device.index if device.index is not None else torch.cuda.current_device()
    t = _STATE.get(("sem", idx))
    if t is None:
        t = _STATE[("sem", idx)] = torch.zeros(SEM_LEN, dtype=torch.int32, device=torch.device("cuda", idx))
    return t


def tune(x, qw, s, z, group: int, n: int, residual=None, cfgs=None, l2_bytes: float = 128e6,
         timings: dict | None = None) -> tuple:
    """Time ``cfgs`` (default :func:`configs`) for this call under CUDA-graph replay with the weights rotated
    over enough copies that L2 holds none (:func:`workbench.kernels.timing.fastest_config`); cache the fastest
    in :data:`_BEST` under :func:`key` and return it. Needs CUDA; call outside graph capture. Raises
    ``RuntimeError`` when no configuration runs and matches :func:`reference` within 1%."""
    from workbench.kernels.timing import fastest_config, weight_copies

    m, k = x.shape
    kk = key(n, k, m, group, x.dtype, residual is not None)
    if kk in _BEST and timings is None:
        return _BEST[kk]
    ws = weight_copies((qw, s, z), l2_bytes)
    step = 8192  # the float32 reference in blocks of output rows (a whole lm_head would take several GB)
    ref = torch.cat([reference(x, qw[i:i + step], s[:, i:i + step], z[:, i:i + step], group,
                               None if residual is None else residual[:, i:i + step]) for i in range(0, n, step)], 1)
    best = fastest_config(cfgs or configs(n, k, m, group, x.device.index or 0),
                          lambda w, cfg: gemm(x, *w, group, n, residual, cfg), ws, ref, timings,
                          f"W4A16 MMA (N={n}, K={k}, M={m})")
    _BEST[kk] = best
    return best


def reference(x, qw, s, z, group: int, residual=None, prescale: bool = False, act: str = "none") -> torch.Tensor:
    """The oracle: ``w_hat = (q - zero) * scale`` in float32 from the packed words (``prescale``: rounded to x's
    dtype, as the prescaled variants and a dequantize-then-matmul runtime have it), ``x.float() @ w_hat.T``,
    rounded to x's dtype, then ``+ residual`` rounded again (HF's order), or for ``act="swiglu"``
    :func:`swiglu_reference` of that. Returns ``[M, N]`` (``[M, N // 2]``) float32."""
    q = unpack_int4_gemv(qw, group).float()
    w_hat = (q - z.float().t().repeat_interleave(group, 1)) * s.float().t().repeat_interleave(group, 1)
    if prescale:
        w_hat = w_hat.to(x.dtype).float()
    y = (x.float() @ w_hat.t()).to(x.dtype)
    if residual is not None:
        y = (y.float() + residual.float()).to(x.dtype)
    if act == "swiglu":
        return swiglu_reference(y)
    return y.float()


def swiglu_reference(gu: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` of ``gu`` ``[M, 2 I]`` = ``[gate | up]`` in its dtype with the rounding of
    :func:`workbench.kernels.fused.silu_mul` and HF's ``act_fn(gate) * up`` (silu in float32, rounded, then the
    product rounded); returns ``[M, I]`` float32."""
    i = gu.shape[1] // 2
    g, u = gu[:, :i].float(), gu[:, i:].float()
    a = (g / (1.0 + torch.exp(-g))).to(gu.dtype).float()
    return (a * u).to(gu.dtype).float()


# ---- bf16 / fp16 weights: the same few-row technique without dequantization (dense_mma_kernel in the source) ----
DENSE_KS = (1, 2, 4, 8, 16)
_DENSE_BEST: dict = {}


@functools.cache
def dense_variants(device_index: int = 0) -> tuple:
    """``(MT, CH, DEPTH)`` tuples of the dense kernel the loaded library holds (a stage is ``32 CH`` columns)."""
    lib = _lib(torch.device("cuda", device_index))
    if lib is None:
        return ()
    return _tuples(lib.wb_dense_mma_variants())


def dense_supported(n: int, k: int, dtype: torch.dtype) -> bool:
    """Whether :func:`dense_gemm` takes a ``[n, k]`` weight: bf16 / fp16, ``n`` a multiple of 16, ``k`` of 64."""
    return dtype in _MAGIC and n % 16 == 0 and n >= 16 and k % 64 == 0


def dense_configs(n: int, k: int, m: int, device_index: int = 0) -> list:
    """``(CH, DEPTH, KS)`` launch configurations of the dense kernel for ``m`` rows: the compiled variants of this
    ``MT`` whose stage divides ``k``, ``KS`` warps up to ``ks_max(MT, 1)`` with at least one stage each."""
    mt = m_tiles(m)
    return [(ch, depth, ks) for vmt, ch, depth in dense_variants(device_index) if vmt == mt and k % (32 * ch) == 0
            for ks in DENSE_KS if ks <= ks_max(mt, 1) and ks <= k // (32 * ch)]


def dense_default_cfg(n: int, k: int, m: int, sms: int = 132) -> tuple:
    """An untuned configuration: 128-column stages where they divide ``k`` and are compiled for this ``MT`` (else
    64), 3-4 in flight, ``KS`` so that about ``24 * sms`` warps run."""
    mt = m_tiles(m)
    have = set(dense_variants())
    ch, depth = next((c, d) for c, d in ((4, 4), (4, 3), (2, 4), (2, 8)) if (mt, c, d) in have and k % (32 * c) == 0)
    ks = 1
    while (n // 16) * ks < 24 * sms and 2 * ks <= ks_max(mt, 1) and 2 * ks <= k // (32 * ch):
        ks *= 2
    return (ch, depth, ks)


def dense_key(n: int, k: int, m: int, dtype: torch.dtype, has_residual: bool) -> tuple:
    """The tuning-cache key of a dense call: shape, row class (``MT``), dtype, residual epilogue."""
    return (n, k, m_tiles(m), dtype, bool(has_residual))


def dense_gemm(x: torch.Tensor, w: torch.Tensor, residual: torch.Tensor | None = None, cfg: tuple | None = None,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """``[M, N] = x @ w.T (+ residual)`` for 1..64 rows on tensor cores, float32 accumulation, HF's rounding with a
    residual (``bf16(bf16(x @ w.T) + residual)``).

    Args: ``x`` ``[M, K]`` bf16 / fp16 (rows 16-byte aligned), ``w`` ``[N, K]`` contiguous in x's dtype
    (:func:`dense_supported`), ``residual`` ``[M, N]`` or None, ``cfg = (CH, DEPTH, KS)`` (default: tuned, else
    :func:`dense_default_cfg`). Returns ``[M, N]`` in x's dtype. Raises ``ValueError`` on arguments it does not take,
    ``RuntimeError`` when the library is unavailable or the launch fails."""
    if x.dim() != 2 or x.dtype not in _MAGIC or w.dim() != 2 or w.dtype != x.dtype or w.shape[1] != x.shape[1]:
        raise ValueError(f"x [M, K] and w [N, K] in bf16 / fp16, got {tuple(x.shape)} {x.dtype}, "
                         f"{tuple(w.shape)} {w.dtype}")
    m, k = x.shape
    n = w.shape[0]
    if not dense_supported(n, k, x.dtype) or not w.is_contiguous() or w.data_ptr() % 16:
        raise ValueError(f"w [{n}, {k}]: want N a multiple of 16, K of 64, contiguous and 16-byte aligned")
    if not 1 <= m <= ROWS_MAX:
        raise ValueError(f"the dense MMA kernel takes 1..{ROWS_MAX} rows, got {m}")
    if x.stride(1) != 1 or (x.stride(0) * 2) % 16 or x.data_ptr() % 16:
        x = x.clone(memory_format=torch.contiguous_format)
    if residual is not None and (residual.shape != (m, n) or residual.dtype != x.dtype
                                 or not residual.is_contiguous()):
        raise ValueError(f"residual must be contiguous {x.dtype} [{m}, {n}], got {tuple(residual.shape)}")
    if out is not None and (out.shape != (m, n) or out.dtype != x.dtype or not out.is_contiguous()):
        raise ValueError(f"out must be contiguous {x.dtype} [{m}, {n}], got {tuple(out.shape)} {out.dtype}")
    lib = _lib(x.device) if x.device.type == "cuda" else None
    if lib is None:
        raise RuntimeError(f"the dense MMA kernel is unavailable: {why_unavailable() or 'not a CUDA tensor'}")
    cfg = cfg or _DENSE_BEST.get(dense_key(n, k, m, x.dtype, residual is not None)) or dense_default_cfg(n, k, m)
    ch, depth, ks = cfg
    if out is None:
        out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    from workbench.kernels.common import use_pdl

    with torch.cuda.device(x.device):
        rc = lib.wb_dense_mma_launch(int(x.dtype == torch.bfloat16), m_tiles(m), ch, depth, ks, x.data_ptr(),
                                     x.stride(0), w.data_ptr(), out.data_ptr(),
                                     residual.data_ptr() if residual is not None else None, m, n, k,
                                     int(use_pdl(x.device)), torch.cuda.current_stream(x.device).cuda_stream)
    if rc:
        raise RuntimeError(f"dense MMA launch failed (code {rc}; -1: no compiled variant MT={m_tiles(m)}, cfg={cfg})")
    return out


def dense_tune(x, w, residual=None, cfgs=None, l2_bytes: float = 128e6, timings: dict | None = None) -> tuple:
    """Time ``cfgs`` (default :func:`dense_configs`) under CUDA-graph replay with ``w`` rotated over enough copies
    that L2 holds none; cache the fastest (per N, K, row class, dtype, residual) and return it. Raises
    ``RuntimeError`` when no configuration matches ``x.float() @ w.float().T`` (rounded) within 1%."""
    from workbench.kernels.timing import fastest_config, weight_copies

    m, k = x.shape
    n = w.shape[0]
    kk = dense_key(n, k, m, x.dtype, residual is not None)
    if kk in _DENSE_BEST and timings is None:
        return _DENSE_BEST[kk]
    ws = weight_copies((w,), l2_bytes)
    step = 8192  # the float32 reference in blocks of output rows (a whole lm_head in float32 would take GBs)
    ref = torch.cat([x.float() @ w[i:i + step].float().t() for i in range(0, n, step)], 1).to(x.dtype)
    if residual is not None:
        ref = (ref.float() + residual.float()).to(x.dtype)
    best = fastest_config(cfgs or dense_configs(n, k, m, x.device.index or 0),
                          lambda wi, cfg: dense_gemm(x, wi[0], residual, cfg), ws, ref.float(), timings,
                          f"dense MMA (N={n}, K={k}, M={m})")
    _DENSE_BEST[kk] = best
    return best


