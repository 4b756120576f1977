"""``QuantConfig``: what to quantize and how (method, bits, granularity, calibration), and named presets.

Terms: ``w_bits`` (weight bits), ``group_size`` (input features sharing one scale and zero point;
DESIGN.md's convention in result columns: ``-1`` per channel, ``0`` per tensor), ``scheme``
(``W4A16`` = 4-bit weights, 16-bit activations), RTN (round to nearest), AWQ (Lin et al. 2023,
arXiv 2306.00978), GPTQ (Frantar et al. 2022, arXiv 2210.17323).

Presets (``QuantConfig.from_name``): one name per configuration, ``{method}_int{bits}_{granularity}``
plus ``_sym`` (symmetric) or ``_fz`` (float zero point), e.g. ``rtn_int4_g128``, ``gptq_int3_g128``,
``rtn_int4_tensor_sym``; llm-compressor's scheme names are aliases of the matching preset
(``w4a16`` = ``rtn_int4_g128_sym``, ``w4a16_asym`` = ``rtn_int4_g128``, ``w8a16`` =
``rtn_int8_channel_sym``; compressed_tensors ``quant_scheme.py``). Grids (:func:`quant_grid`): named lists of presets shared by notebook 01 and
``benchmarks/quant_table.py``.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass

from workbench.registry import did_you_mean as _did_you_mean
from workbench.validate import check_field_types

METHODS = ("rtn", "awq", "gptq")
GRANULARITIES = ("per_tensor", "per_channel", "group")
SCALE_DTYPES = ("float16", "bfloat16", "float32")
ZERO_POINTS = ("int", "float")
AWQ_INPUTS = ("fp", "quantized")


def _choice(cfg, name: str, options) -> None:
    v = getattr(cfg, name)
    if not isinstance(v, str) or v not in options:
        raise ValueError(f"QuantConfig.{name}={v!r} is unknown; use one of {options}." + _did_you_mean(v, options))


def _integer(cfg, name: str, lo: int, hi: int | None = None, hint: str = "") -> None:
    """``name`` must be an integer (not a bool, not a float such as 4.0) in ``[lo, hi]``."""
    v = getattr(cfg, name)
    ok = isinstance(v, numbers.Integral) and not isinstance(v, bool)
    if ok:
        object.__setattr__(cfg, name, int(v))  # numpy integers -> int (stable results-store keys)
    if not ok or v < lo or (hi is not None and v > hi):
        rng = f"from {lo} to {hi}" if hi is not None else f">= {lo}"
        raise ValueError(f"QuantConfig.{name}={v!r} must be an integer {rng}{hint}")


def _boolean(cfg, name: str) -> None:
    v = getattr(cfg, name)
    if type(v).__name__ not in ("bool", "bool_"):
        raise ValueError(f"QuantConfig.{name}={v!r} must be True or False")
    object.__setattr__(cfg, name, bool(v))


@dataclass(frozen=True)
class QuantConfig:
    """Weight-only quantization settings (activations stay in the model dtype: ``W{bits}A16``).

    Raises ``ValueError`` naming the field (``QuantConfig.<field>=...``) and the fix on bad values:
    an unknown method, granularity, zero point, scale dtype or AWQ input mode (with "did you mean"),
    a non-integer or out-of-range integer field (bits 2-8, group size >= 1, calibration sizes, GPTQ
    block, AWQ grid >= 2), a non-bool flag, damping outside (0, 1], ``act_order`` with dynamic groups.
    A group size that does not divide a layer's ``in_features`` is caught by ``quantize`` (it knows
    the layer names), with the divisors and ``partial_groups=True`` as fixes.
    """

    method: str = "rtn"  # rtn | awq | gptq
    bits: int = 4  # weight bits, 2..8; INT4 packs two codes per byte
    granularity: str = "group"  # per_tensor | per_channel | group: how many weights share a scale
    # input features per group (granularity="group"). 64 divides the built-in model's widths (576 =
    # 9 x 64, 1536) and those of nearly every LLM, and is native to every INT4 kernel of the runtime;
    # the W4A16 norm g128 is the "w4a16" preset (576 is not a multiple of 128: use partial_groups)
    group_size: int = 64
    partial_groups: bool = False  # allow a narrower last group when group_size does not divide in_features
    symmetric: bool = False  # symmetric: zero point fixed at 2^(bits-1), scale = absmax / ((2^bits-1)/2)
    zero_point: str = "int"  # int (GPTQ/AWQ/compressed-tensors) | float (llama.cpp Q4_1: w = d*q + m)
    skip: tuple[str, ...] = ("lm_head",)  # module names (or name suffixes) kept in full precision
    scale_dtype: str = "float16"  # storage dtype of scales (float16 is what W4A16 kernels read)
    n_calib_samples: int = 32  # calibration windows (AWQ, GPTQ); small because CPU time is scarce
    calib_seq_len: int = 256  # tokens per calibration window
    gptq_damp: float = 0.01  # GPTQ percdamp: lambda = damp * mean(diag(H)) added to diag(H)
    gptq_block: int = 128  # GPTQ lazy-batch block width (columns updated together)
    act_order: bool = False  # GPTQ: quantize columns in order of decreasing diag(H) (needs static_groups)
    # GPTQ group parameters: False = at each group's first column from the lazily updated weights (the
    # GPTQ reference fasterquant, AutoGPTQ static_groups=False); True = from the original weights before
    # any update (AutoGPTQ static_groups=True, llm-compressor's GPTQModifier)
    static_groups: bool = False
    # GPTQ: quantize q/k/v, then o, then gate/up, then down, re-capturing each sub-group's inputs on the
    # partly quantized layer (AutoGPTQ / GPTQModel true_sequential=True); False: one capture per layer
    true_sequential: bool = True
    awq_grid: int = 20  # AWQ: alpha tried over {0, 1/grid, ..., (grid-1)/grid}
    awq_max_tokens: int = 2048  # AWQ: calibration tokens used to score each alpha (CPU budget)
    # AWQ calibration inputs: fp = every layer sees the full-precision model's activations (llm-awq
    # run_awq, AutoAWQ AwqQuantizer); quantized = the activations of the already-quantized layers
    awq_inputs: str = "fp"
    seed: int = 0  # calibration window sampling

    def __post_init__(self):
        check_field_types(self)  # numbers of the declared types; every error names its field
        _choice(self, "method", METHODS)
        _integer(self, "bits", 2, 8, "; pick a bit width from 2 to 8")
        _choice(self, "granularity", GRANULARITIES)
        _integer(self, "group_size", 1, None, " (e.g. 32, 64, 128)")
        for f in ("partial_groups", "symmetric", "act_order", "static_groups", "true_sequential"):
            _boolean(self, f)
        _choice(self, "zero_point", ZERO_POINTS)
        _choice(self, "scale_dtype", SCALE_DTYPES)
        _choice(self, "awq_inputs", AWQ_INPUTS)
        skip = (self.skip,) if isinstance(self.skip, str) else self.skip
        try:
            skip = tuple(skip)
        except TypeError:
            skip = None
        if skip is None or not all(isinstance(s, str) for s in skip):
            raise ValueError(f"QuantConfig.skip={self.skip!r} must be a module name or a tuple of names "
                             "(e.g. ('lm_head',))")
        object.__setattr__(self, "skip", skip)
        _integer(self, "n_calib_samples", 1)
        _integer(self, "calib_seq_len", 2, None, " tokens")
        _integer(self, "gptq_block", 1, None, " (128 in the GPTQ paper)")
        _integer(self, "awq_grid", 2, None, " (20 in the AWQ reference code)")
        _integer(self, "awq_max_tokens", 1)
        _integer(self, "seed", 0)
        d = self.gptq_damp
        if isinstance(d, bool) or not isinstance(d, numbers.Real) or math.isnan(d) or not 0 < d <= 1:
            raise ValueError(f"QuantConfig.gptq_damp={d!r} must be a number in (0, 1]; 0.01 is the GPTQ default")
        object.__setattr__(self, "gptq_damp", float(d))
        if self.act_order and self.granularity == "group" and not self.static_groups:
            raise ValueError("QuantConfig.act_order=True with groups needs static_groups=True: the stored "
                             "format keeps groups contiguous in the original column order (no g_idx)")

    # -- derived names --------------------------------------------------------------------------
    @property
    def group_size_code(self) -> int:
        """DESIGN.md's ``group_size`` column: the group size, ``-1`` per channel, ``0`` per tensor."""
        return {"per_tensor": 0, "per_channel": -1}.get(self.granularity, self.group_size)

    @property
    def scheme(self) -> str:
        """``W{bits}A16`` (weight-only quantization; activations stay 16/32-bit)."""
        return f"W{self.bits}A16"

    @property
    def label(self) -> str:
        """Short human label, e.g. ``"GPTQ W4 g128 asym"``."""
        g = {"per_tensor": "tensor", "per_channel": "channel"}.get(self.granularity, f"g{self.group_size}")
        zp = "sym" if self.symmetric else ("asym-fz" if self.zero_point == "float" else "asym")
        return f"{self.method.upper()} W{self.bits} {g} {zp}"

    def to_row(self) -> dict:
        """Config fields as result columns (``method``, ``w_bits``, ``group_size``, ``scheme``, ...)."""
        d = asdict(self)
        d["w_bits"] = d.pop("bits")
        d["group_size"] = self.group_size_code
        d["skip"] = ",".join(self.skip)
        d["scheme"] = self.scheme
        d["label"] = self.label
        return d

    @classmethod
    def from_name(cls, name: str, **overrides) -> QuantConfig:
        """A named preset (see ``PRESETS``; llm-compressor scheme names in ``ALIASES``) with optional
        field overrides. Raises ``ValueError`` with "did you mean" for an unknown name."""
        key = ALIASES.get(name, name)
        if key not in PRESETS:
            names = sorted(PRESETS) + sorted(ALIASES)
            raise ValueError(f"quantization preset {name!r} is unknown; use one of {names}." + _did_you_mean(name, names))
        return cls(**{**PRESETS[key], **overrides})


def _presets() -> dict[str, dict]:
    """Every bit width x granularity (RTN), AWQ / GPTQ at INT3/INT4, a float-zero row, named
    systematically; group presets need a group size that divides every layer (``quant_grid`` and
    ``from_name(..., partial_groups=True)`` allow a narrower last group instead)."""
    out: dict[str, dict] = {}
    grans = {"tensor": {"granularity": "per_tensor"}, "channel": {"granularity": "per_channel"},
             "g128": {"group_size": 128}, "g64": {"group_size": 64}, "g32": {"group_size": 32}}
    for bits in (2, 3, 4, 8):
        for g, kw in grans.items():
            for sym in (False, True):
                if g == "tensor" and not sym:
                    continue  # per-tensor asymmetric: not a scheme anyone ships
                out[f"rtn_int{bits}_{g}" + ("_sym" if sym else "")] = {"method": "rtn", "bits": bits, **kw,
                                                                       "symmetric": sym}
    for m in ("awq", "gptq"):
        for bits in (3, 4):
            for g in (128, 64, 32):
                out[f"{m}_int{bits}_g{g}"] = {"method": m, "bits": bits, "group_size": g}
    out["rtn_int4_g32_fz"] = {"method": "rtn", "bits": 4, "group_size": 32, "zero_point": "float"}
    return out


PRESETS: dict[str, dict] = _presets()

# llm-compressor / compressed-tensors scheme names (quant_scheme.py W4A16, W4A16_ASYM, W8A16): strict
# divisibility, as there (a layer whose width 128 does not divide raises, naming the fix)
ALIASES: dict[str, str] = {"w4a16": "rtn_int4_g128_sym", "w4a16_asym": "rtn_int4_g128", "w8a16": "rtn_int8_channel_sym"}

_FULL = tuple(f"rtn_int{b}_{g}" for b in (2, 3, 4, 8) for g in ("tensor_sym", "channel", "g128", "g64", "g32")) + (
    "awq_int3_g128", "awq_int4_g128", "gptq_int3_g128", "gptq_int4_g128", "rtn_int4_g32_fz")

# named grids of presets; the sweep adds the full-precision point, so "full" is 26 points
GRIDS: dict[str, tuple[str, ...]] = {
    "full": _FULL,
    "small": tuple(n for n in _FULL if "_int3_" in n or "_int4_" in n),
    # one point per question notebook 01 asks; AWQ and GPTQ at INT4 g128
    "demo": ("rtn_int8_channel", "rtn_int4_tensor_sym", "rtn_int4_channel", "rtn_int4_g128", "rtn_int4_g32",
             "rtn_int3_g128", "rtn_int2_g32", "awq_int4_g128", "gptq_int4_g128", "rtn_int4_g32_fz"),
    # the CPU demo (notebook 01 on 2 cores): the questions above at the fewest points
    "demo_cpu": ("rtn_int8_channel_sym", "rtn_int4_tensor_sym", "rtn_int4_g128", "rtn_int3_g128", "awq_int4_g128",
                 "gptq_int4_g128"),
    # benchmarks/quant_table.py, most informative first (a run cut short still answers the main question)
    "table": ("rtn_int4_g128", "gptq_int4_g128", "awq_int4_g128", "rtn_int8_channel_sym", "rtn_int3_g128",
              "rtn_int4_tensor_sym", "rtn_int4_g32", "rtn_int4_g32_fz"),
    "smoke": ("rtn_int4_tensor_sym", "rtn_int4_g64"),
    # run_quant_speed on a random-init 7B shape (notebook 01's timing section): the W4A16 runtimes of the three methods
    "timing": ("rtn_int4_g128", "awq_int4_g128", "gptq_int4_g128"),
}


def quant_grid(name: str, *, partial_groups: bool = True, **overrides) -> list[QuantConfig]:
    """The configs of grid ``name`` (see ``GRIDS``) with ``overrides`` applied to each (e.g.
    ``n_calib_samples=16``). A grid compares group sizes on any model, so by default a group that does
    not divide a layer's width leaves a narrower last group (``partial_groups``; the built-in model's
    576 = 4 x 128 + 64). Raises ``ValueError`` with "did you mean" for an unknown grid."""
    if name not in GRIDS:
        raise ValueError(f"quantization grid {name!r} is unknown; use one of {sorted(GRIDS)}." + _did_you_mean(name, GRIDS))
    return [QuantConfig.from_name(p, partial_groups=partial_groups, **overrides) for p in GRIDS[name]]


__all__ = ["ALIASES", "GRANULARITIES", "GRIDS", "METHODS", "PRESETS", "QuantConfig", "quant_grid"]
