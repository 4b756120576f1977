"""``QuantConfig``: what to quantize and how (method, bits, granularity, calibration).

Terms: ``w_bits`` (weight bits), ``group_size`` (input features sharing one scale and zero point;
DESIGN.md's convention in result columns: ``-1`` per channel, ``0`` per tensor), ``scheme``
(``W4A16`` = 4-bit weights, 16-bit activations), RTN (round to nearest), AWQ (Lin et al. 2023,
arXiv 2306.00978), GPTQ (Frantar et al. 2022, arXiv 2210.17323).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from workbench.registry import did_you_mean as _did_you_mean
from workbench.validate import check_field_types

METHODS = ("rtn", "awq", "gptq")
GRANULARITIES = ("per_tensor", "per_channel", "group")
SCALE_DTYPES = ("float16", "bfloat16", "float32")


@dataclass(frozen=True)
class QuantConfig:
    """Weight-only quantization settings (activations stay in the model dtype: ``W{bits}A16``).

    Raises ``ValueError`` naming the field (and the fix) on bad values: bits outside 2-8, an unknown
    method or granularity (with "did you mean"), a non-positive group size for ``granularity="group"``,
    bad calibration sizes, damping outside (0, 1], an AWQ grid smaller than 2.
    A group size that does not divide a layer's ``in_features`` is caught by ``quantize`` (it knows
    the layer names).
    """

    method: str = "rtn"  # rtn | awq | gptq
    bits: int = 4  # weight bits, 2..8; INT4 packs two codes per byte
    granularity: str = "group"  # per_tensor | per_channel | group: how many weights share a scale
    group_size: int = 128  # input features per group (granularity="group" only); 128 is the W4A16 norm
    partial_groups: bool = False  # allow a narrower last group when group_size does not divide in_features
    symmetric: bool = False  # symmetric: zero point fixed at 2^(bits-1), scale = absmax / ((2^bits-1)/2)
    zero_point: str = "int"  # int (GPTQ/AWQ/compressed-tensors) | float (llama.cpp Q4_1: w = d*q + m)
    skip: tuple[str, ...] = ("lm_head",)  # module names (or name suffixes) kept in full precision
    scale_dtype: str = "float16"  # storage dtype of scales (float16 is what W4A16 kernels read)
    n_calib_samples: int = 32  # calibration windows (AWQ, GPTQ); small because CPU time is scarce
    calib_seq_len: int = 256  # tokens per calibration window
    gptq_damp: float = 0.01  # GPTQ percdamp: lambda = damp * mean(diag(H)) added to diag(H)
    gptq_block: int = 128  # GPTQ lazy-batch block width (columns updated together)
    act_order: bool = False  # GPTQ: quantize columns in order of decreasing diag(H)
    awq_grid: int = 20  # AWQ: alpha tried over {0, 1/grid, ..., (grid-1)/grid}
    awq_max_tokens: int = 2048  # AWQ: calibration tokens used to score each alpha (CPU budget)
    seed: int = 0  # calibration window sampling

    def __post_init__(self):
        check_field_types(self)  # integer fields take integers; every error names its field
        if self.method not in METHODS:
            raise ValueError(f"method={self.method!r} is unknown; use one of {METHODS}."
                             + _did_you_mean(self.method, METHODS))
        if not isinstance(self.bits, int) or not 2 <= self.bits <= 8:
            raise ValueError(f"bits={self.bits!r} is outside 2-8; pick an integer bit width from 2 to 8")
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"granularity={self.granularity!r} is unknown; use one of {GRANULARITIES}."
                             + _did_you_mean(self.granularity, GRANULARITIES))
        if self.granularity == "group" and (not isinstance(self.group_size, int) or self.group_size < 1):
            raise ValueError(f"group_size={self.group_size!r} must be a positive integer with "
                             "granularity='group' (e.g. 32, 64, 128)")
        if self.zero_point not in ("int", "float"):
            raise ValueError(f"zero_point={self.zero_point!r} is unknown; use 'int' or 'float'."
                             + _did_you_mean(self.zero_point, ("int", "float")))
        if self.scale_dtype not in SCALE_DTYPES:
            raise ValueError(f"scale_dtype={self.scale_dtype!r} is unknown; use one of {SCALE_DTYPES}."
                             + _did_you_mean(self.scale_dtype, SCALE_DTYPES))
        if isinstance(self.skip, str):
            object.__setattr__(self, "skip", (self.skip,))
        object.__setattr__(self, "skip", tuple(self.skip))
        if self.n_calib_samples < 1:
            raise ValueError(f"n_calib_samples={self.n_calib_samples} must be >= 1")
        if self.calib_seq_len < 2:
            raise ValueError(f"calib_seq_len={self.calib_seq_len} must be >= 2 tokens")
        if not 0 < self.gptq_damp <= 1:
            raise ValueError(f"gptq_damp={self.gptq_damp} must be in (0, 1]; 0.01 is the GPTQ default")
        if self.gptq_block < 1:
            raise ValueError(f"gptq_block={self.gptq_block} must be >= 1 (128 in the GPTQ paper)")
        if self.awq_grid < 2:
            raise ValueError(f"awq_grid={self.awq_grid} must be >= 2 (20 in the AWQ reference code)")
        if self.awq_max_tokens < 1:
            raise ValueError(f"awq_max_tokens={self.awq_max_tokens} must be >= 1")

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
        """A named preset (see ``PRESETS``) with optional field overrides.

        Raises ``ValueError`` with "did you mean" for an unknown name.
        """
        if name not in PRESETS:
            raise ValueError(f"preset {name!r} is unknown; use one of {sorted(PRESETS)}."
                             + _did_you_mean(name, PRESETS))
        return cls(**{**PRESETS[name], **overrides})


PRESETS: dict[str, dict] = {
    # llm-compressor's W4A16 preset: symmetric INT4, groups of 128 (compressed_tensors quant_scheme.py)
    "w4a16": {"method": "rtn", "bits": 4, "granularity": "group", "group_size": 128, "partial_groups": True, "symmetric": True},
    "w4a16_asym": {"method": "rtn", "bits": 4, "granularity": "group", "group_size": 128, "partial_groups": True, "symmetric": False},
    "w8a16": {"method": "rtn", "bits": 8, "granularity": "per_channel", "symmetric": True},
    "rtn_int4_tensor_sym": {"method": "rtn", "bits": 4, "granularity": "per_tensor", "symmetric": True},
    "rtn_int4_g128": {"method": "rtn", "bits": 4, "granularity": "group", "group_size": 128, "partial_groups": True},
    "awq_int4_g128": {"method": "awq", "bits": 4, "granularity": "group", "group_size": 128, "partial_groups": True},
    "gptq_int4_g128": {"method": "gptq", "bits": 4, "granularity": "group", "group_size": 128, "partial_groups": True},
    "rtn_int8_channel": {"method": "rtn", "bits": 8, "granularity": "per_channel", "symmetric": True},
    "rtn_int3_g128": {"method": "rtn", "bits": 3, "granularity": "group", "group_size": 128, "partial_groups": True},
}

__all__ = ["GRANULARITIES", "METHODS", "PRESETS", "QuantConfig"]
