"""Quantized runtime: the codes of quantized Linears -> the engine's quantized matmuls.

The step gpt-fast calls ``convert_for_runtime`` (``quantize.py``: ``WeightOnlyInt4QuantHandler`` turns
the quantized state dict into ``WeightOnlyInt4Linear`` modules). Input: any module with
``quant_params()`` (:class:`workbench.quant.QuantLinear`, duck-typed: the engine does not import the
quantization package): ``q`` ``uint8`` ``[out, in]`` unsigned codes, ``scales`` / ``zeros``
``[out, ceil(in/g)]``, ``group_size`` ``g``, ``bits``, ``input_scale`` ``[in]`` or None, with
``w_hat[o, i] = (q[o, i] - zeros[o, i // g]) * scales[o, i // g]`` and ``y = (x / input_scale) @ w_hat.T``.

Which matmul runs a weight (the label each one gets says which, and why):

* ``bits <= 4``: :class:`workbench.engine.int4.Int4Linear` with the engine's W4A16 backend. W2/W3
  codes are below 16, so they run there exactly (stored at 4 bits). A group layout the kernels do not
  take is re-expressed exactly with a runtime group ``G`` that divides both the quantization group and
  ``in`` (the largest power of two in 32..256 dividing ``gcd(g, in)``; each group's scale and zero
  repeated): a partial last group (``576 = 4 x 128 + 64`` -> ``G = 64``), per channel, per tensor.
  If the backend refuses the shape (``ValueError`` / ``RuntimeError`` at packing), ``in`` is zero-padded
  to a multiple of 128 as gpt-fast's ``WeightOnlyInt4Linear(padding=True)`` does (the input is padded
  per call); if it still refuses, its small kernel paired with ``"dequant"`` for more rows (e.g.
  ``"triton:dequant"``, where the engine offers that pairing), and last the ``"dequant"`` backend
  (with a warning).
* ``5 <= bits <= 8``: :class:`workbench.engine.int8.Int8Linear` (``int8pack`` per channel / per
  tensor, ``dequant`` for groups).
* anything else (mixed float and quantized Linears in one fused matmul, different layouts or AWQ
  scales across it): the caller falls back to the dense dequantized weight, with a warning.

On the CPU (:mod:`workbench.engine.cpu`) the choice follows :func:`workbench.engine.routing.choose`: with bf16
activations W4A16 runs torch's CPU INT4 kernel (``cpu-int4pack``) and W8A16 per channel ``int8pack``; where the
engine keeps a dequantized copy (``cache=True``, the CPU default) they take calls of up to
``EngineConfig.cpu_int_max_rows`` rows and the copy takes more (prefill) (:class:`~workbench.engine.cpu.FewRows`).
A float32 engine keeps the dequantized weight (:class:`Dequantized`): with float32 activations those kernels are
slower than a dense matmul (see :mod:`workbench.engine.cpu`); its route table says so.

AWQ's ``input_scale`` is returned to the caller, which folds ``1 / s`` into the RMSNorm weight in front
of q/k/v and gate/up (exact in real arithmetic: ``(x_hat * g) / s = x_hat * (g / s)``) and otherwise
divides the activation (:class:`InputScaled`, for o_proj and down_proj).
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F

from workbench.engine.config import EngineConfig
from workbench.engine.cpu import CpuInt4Linear, FewRows
from workbench.engine.int4 import Int4Linear, dequantize_int4
from workbench.engine.int8 import Int8Linear
from workbench.engine.routing import Problem, choose

__all__ = ["Dequantized", "InputScaled", "PaddedInput", "cpu_int4_linear", "fuse_params", "quant_matmul", "quant_params_of",
           "runtime_group"]

KERNEL_GROUPS = (256, 128, 64, 32)  # group sizes every INT4 kernel of the engine takes (tinygemm: 32-256)
PAD_MULTIPLE = 128  # tinygemm packs K in tiles of 8 x 16 columns


class InputScaled:
    """``y = inner(x / s)``: AWQ's per-input-channel scale ``s`` ``[in]`` where no RMSNorm precedes."""

    def __init__(self, inner, s: torch.Tensor):
        self.inner, self.s = inner, s

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x / self.s)

    def nbytes(self) -> int:
        return self.inner.nbytes() + self.s.numel() * self.s.element_size()

    def warmup(self, max_m: int = 4) -> None:
        if hasattr(self.inner, "warmup"):
            self.inner.warmup(max_m)

    def route(self, m: int) -> tuple[str, str]:
        return self.inner.route(m)


class PaddedInput:
    """``y = inner(pad(x))``: ``inner`` was packed with ``in`` zero-padded to ``padded`` columns."""

    def __init__(self, inner, in_features: int, padded: int):
        self.inner, self.pad = inner, padded - in_features

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(F.pad(x, (0, self.pad)))

    def nbytes(self) -> int:
        return self.inner.nbytes()

    def warmup(self, max_m: int = 4) -> None:
        if hasattr(self.inner, "warmup"):
            self.inner.warmup(max_m)

    def route(self, m: int) -> tuple[str, str]:
        kernel, why = self.inner.route(m)
        return kernel, f"in padded by {self.pad} columns" + (f"; {why}" if why else "")


class Dequantized:
    """``y = x @ w_hat.T`` with ``w_hat`` of the quantized matmul ``inner`` (``Int4Linear`` with the
    ``"dequant"`` backend, or ``Int8Linear``) computed once; ``nbytes`` counts ``inner``'s format."""

    def __init__(self, inner, dtype: torch.dtype):
        self.inner = inner
        if isinstance(inner, Int8Linear):
            self.w = inner.dequantize(dtype)
        else:
            self.w = dequantize_int4(inner.q, inner.scales, inner.zeros, dtype)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.w)

    def route(self, m: int) -> tuple[str, str]:
        return "dequant", "the weight dequantized once (F.linear)" + (
            f"; {self.route_why}" if getattr(self, "route_why", "") else "")

    def nbytes(self) -> int:
        return self.inner.nbytes()


def cpu_int4_linear(q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, dtype, config: EngineConfig | None = None):
    """The engine's own RTN INT4 weight (``w4a16="rtn"``) on the CPU: ``q`` ``[out, in]`` uint8 codes, ``scales`` /
    ``zeros`` ``[out, in // g]``. The first kernel :func:`~workbench.engine.routing.choose` gives for a one-row call
    with a dequantized copy kept: ``cpu-int4pack`` (bf16 activations) for up to ``config.cpu_int_max_rows`` rows
    and the copy above (:class:`~workbench.engine.cpu.FewRows`), else the weight dequantized once
    (:class:`Dequantized`; float32 activations, where the integer kernel is slower than ``F.linear``)."""
    config = config or EngineConfig.from_env()
    n, k = q.shape
    name, why = choose("w4a16", Problem(n, k, 1, k // scales.shape[1], dtype, "cpu", copy=True), config)
    if name == "cpu-int4pack":
        lin = FewRows(CpuInt4Linear(q.cpu(), scales.cpu(), zeros.cpu(), dtype), dtype, config.cpu_int_max_rows)
    else:
        lin = Dequantized(Int4Linear(q, scales, zeros, dtype, "dequant", torch.device("cpu"), config), dtype)
    lin.route_why = why
    return lin


def quant_params_of(module) -> dict | None:
    """``module.quant_params()`` for a quantized Linear, ``None`` for a float one."""
    f = getattr(module, "quant_params", None)
    return f() if callable(f) else None


def fuse_params(params: list[dict]) -> dict:
    """Concatenate the quant params of Linears that read the same input along ``out`` (q/k/v;
    gate/up). Raises ``ValueError`` naming what differs (bits, group size, zero layout, AWQ scale)."""
    p0 = params[0]
    for p in params[1:]:
        for key in ("bits", "group_size"):
            if p[key] != p0[key]:
                raise ValueError(f"{key} differs across the fused Linears ({p0[key]} vs {p[key]})")
        if p["zeros"].dtype != p0["zeros"].dtype or p["q"].shape[1] != p0["q"].shape[1]:
            raise ValueError("zero-point dtype or in_features differ across the fused Linears")
        a, b = p0["input_scale"], p["input_scale"]
        if (a is None) != (b is None) or (a is not None and not torch.equal(a, b)):
            raise ValueError("the fused Linears have different AWQ input scales")
    if len(params) == 1:
        return dict(p0)
    cat = {k: torch.cat([p[k] for p in params], 0) for k in ("q", "scales", "zeros")}
    return {**p0, **cat}


def runtime_group(g: int, k: int) -> int:
    """Group width ``G`` for the INT4 kernels that represents quantization groups of width ``g`` on
    ``k`` input features exactly: the largest of :data:`KERNEL_GROUPS` dividing ``gcd(g, k)``, else
    ``gcd(g, k)`` itself (only the ``"dequant"`` backend takes such a group)."""
    d = math.gcd(int(g), int(k))
    return next((G for G in KERNEL_GROUPS if d % G == 0), d)


def _expand(t: torch.Tensor, g: int, G: int, k: int) -> torch.Tensor:
    """Per-group values ``[out, ceil(k/g)]`` -> per runtime group ``[out, k // G]``."""
    idx = torch.arange(k // G, device=t.device) * G // g
    return t.index_select(1, idx)


def _padded(q, s, z, G: int, kp: int):
    """Codes and group params with ``in`` padded to ``kp``: the padded groups hold zero weights (code 8,
    zero 8, scale 1)."""
    k, n_pad = q.shape[1], (kp - q.shape[1]) // G
    qp = torch.cat([q, torch.full((q.shape[0], kp - k), 8, dtype=torch.uint8, device=q.device)], 1)
    sp = torch.cat([s, torch.ones(s.shape[0], n_pad, dtype=s.dtype, device=s.device)], 1)
    zp = torch.cat([z, torch.full((z.shape[0], n_pad), 8.0, device=z.device)], 1)
    return qp, sp, zp


def _int4(p: dict, dtype, device, backend: str, config: EngineConfig | None = None):
    """``(Int4Linear or PaddedInput, label)``: ``backend`` as is, then with ``in`` padded to a multiple of
    :data:`PAD_MULTIPLE`, then its small kernel with ``"dequant"`` for more rows (where the engine
    offers that pairing), then ``"dequant"`` (with a warning)."""
    q, k = p["q"], p["q"].shape[1]
    G = runtime_group(p["group_size"], k)
    s, z = _expand(p["scales"], p["group_size"], G, k), _expand(p["zeros"], p["group_size"], G, k).float()
    layout = f"g{G}" + (f" (from g{p['group_size']})" if G != p["group_size"] else "")
    if backend == "dequant":
        return Int4Linear(q, s, z, dtype, "dequant", device, config), f"int4 dequant {layout}"
    errors = []
    if G in KERNEL_GROUPS:
        kp = -(-k // PAD_MULTIPLE) * PAD_MULTIPLE
        small = backend.partition(":")[0]
        tries = [(backend, k)] + ([(backend, kp)] if kp != k else []) + \
            ([(f"{small}:dequant", k)] if small != backend else [])
        for be, width in tries:
            try:
                if width == k:
                    return Int4Linear(q, s, z, dtype, be, device, config), f"int4 {be} {layout}"
                lin = Int4Linear(*_padded(q, s, z, G, width), dtype, be, device, config)
                return PaddedInput(lin, k, width), f"int4 {be} {layout}, in {k} padded to {width}"
            except (ValueError, RuntimeError) as e:
                errors.append(f"{be}{'' if width == k else f' padded to {width}'}: {type(e).__name__}: {str(e)[:100]}")
    else:
        errors.append(f"group {G} is not a kernel group {KERNEL_GROUPS}")
    warnings.warn(f"INT4 backend {backend!r} cannot run a [{q.shape[0]}, {k}] weight ({'; '.join(errors)}); "
                  "running it with the 'dequant' backend", stacklevel=3)
    return Int4Linear(q, s, z, dtype, "dequant", device, config), \
        f"int4 dequant {layout} ({backend} refused: {errors[0]})"


def quant_matmul(params: dict, dtype: torch.dtype, device, int4_backend: str, cache: bool = False,
                 config: EngineConfig | None = None):
    """Runtime matmul for (fused) quant params: returns ``(matmul, label)``; see the module docstring.
    ``cache``: a matmul that would dequantize on every call (INT4 ``"dequant"``, INT8) keeps its
    dequantized weight instead (:class:`Dequantized`; on the CPU with bf16 beside the INT kernel,
    :class:`~workbench.engine.cpu.FewRows`). ``config``: the kernels routing may choose (default
    ``EngineConfig()``). The AWQ ``input_scale`` is not applied here (the caller folds or wraps it)."""
    config = config or EngineConfig()
    if torch.device(device).type == "cpu" and int4_backend == "dequant":  # the CPU default (another: as asked)
        return _cpu(params, dtype, cache, config)
    lin, label = (_int4(params, dtype, device, int4_backend, config) if params["bits"] <= 4
                  else _int8(params, dtype, device))
    if getattr(getattr(lin, "inner", lin), "mid", None) == "tinygemm":
        label += " + tinygemm copy for 2-64 rows"  # a second packing held in memory (Int4Linear.nbytes)
    if cache and (isinstance(lin, Int8Linear) or getattr(lin, "backend", None) == "dequant"):
        return Dequantized(lin, dtype), label + ", dequantized once"
    return lin, label


def _int8(params: dict, dtype, device, backend: str | None = None):
    q, k, g = params["q"], params["q"].shape[1], params["group_size"]
    s, z = params["scales"], params["zeros"]
    if s.shape[1] > 1:  # groups (a partial last one included) -> runtime groups of gcd(g, in)
        G = math.gcd(g, k)
        s, z = _expand(s, g, G, k), _expand(z, g, G, k)
    lin = Int8Linear(q, s, z, dtype, backend if s.shape[1] == 1 else None, device)
    return lin, f"int8 {lin.backend}" + (f" g{lin.group_size}" if s.shape[1] > 1 else "")


def _cpu(params: dict, dtype, cache: bool, config: EngineConfig):
    """The CPU matmul of :func:`quant_matmul`: the first kernel :func:`~workbench.engine.routing.choose` gives for
    a one-row call (``cpu-int4pack`` / ``int8pack`` or ``dequant``), with the dequantized copy beside it where
    ``cache``."""
    q, k, g, bits = params["q"], params["q"].shape[1], params["group_size"], params["bits"]
    kind = "w4a16" if bits <= 4 else "w8a16"
    G = runtime_group(g, k) if bits <= 4 else (k if params["scales"].shape[1] == 1 else math.gcd(g, k))
    name, why = choose(kind, Problem(q.shape[0], k, 1, G, dtype, "cpu", copy=cache), config)
    if name == "cpu-int4pack":
        s, z = _expand(params["scales"], g, G, k), _expand(params["zeros"], g, G, k).float()
        lin, label = CpuInt4Linear(q.cpu(), s, z, dtype), f"int4 cpu-int4pack g{G}" + (
            f" (from g{g})" if G != g else "")
    else:
        lin, label = _int4(params, dtype, "cpu", "dequant", config) if bits <= 4 else _int8(params, dtype, "cpu", name if name == "int8pack" else None)
    lin.route_why = why
    if name in ("cpu-int4pack", "int8pack") and cache:
        few = FewRows(lin, dtype, config.cpu_int_max_rows)
        few.route_why = why
        return few, label + f" for <= {config.cpu_int_max_rows} rows, dequantized copy for more"
    if cache and name == "dequant":
        d = Dequantized(lin, dtype)
        d.route_why = why
        return d, label + ", dequantized once"
    return lin, label
