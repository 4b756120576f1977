"""KV-cache storage formats for the engine: full precision, FP8 (e4m3) and INT8 with per-head scales.

Formats, by ``kv_dtype`` name (vLLM's ``--kv-cache-dtype`` names where vLLM has the format):

* ``"auto"``: the engine's compute dtype (bf16 on CUDA, float32 on CPU); no hook, the engine's own
  cache tensors and every fused kernel;
* ``"float32"``, ``"bfloat16"``, ``"float16"``: stored in that float type, cast to the compute dtype
  when attention reads it;
* ``"fp8_e4m3"`` (vLLM ``fp8`` / ``fp8_e4m3``): ``float8_e4m3fn`` codes of ``x / scale`` saturated to
  +-448 with a per-tensor ``scale = 1.0`` (vLLM's ``k_scale = v_scale = 1.0`` when no scales are
  calibrated); 1 byte per element; 3 mantissa bits, so a relative rounding error up to 2^-4;
* ``"int8"``: symmetric INT8 with one float32 scale per (token, KV head), ``s = max_d |x_d| / 127``
  over the head's ``D`` values, ``q = round(x / s)`` (dynamic per-head, per-token scales as in
  LMDeploy's online INT8 KV cache, ``quant_policy=8``, which is asymmetric there); ``1 + 4 / D`` bytes
  per element.

A quantized (or other-dtype) cache goes through :class:`QuantizedKVCache`, which the engine calls at
three points: allocation, the write after RoPE (:meth:`QuantizedKVCache.qkv_rope_write`, the torch
RoPE of :func:`workbench.engine.ops.qkv_rope` followed by a quantizing write) and the read before
attention (:meth:`QuantizedKVCache.read`, dequantized to the compute dtype for
``F.scaled_dot_product_attention``). Engine paths with such a cache: the torch RoPE and the SDPA
attention only; the fused matmuls of :mod:`workbench.engine.dispatch` (whose qkv projection writes the cache)
and the Triton decode-attention kernel (which reads compute-dtype keys) are switched off. Weight matmuls
(bf16 or W4A16 backends) are unaffected. Quantization saves KV bytes; without a fused dequantizing
attention kernel it does not save time.
"""

from __future__ import annotations

import difflib

import torch

from workbench.arch import kv_bytes_per_token
from workbench.engine.ops import qkv_rope

__all__ = ["FLOAT_KV_DTYPES", "KV_DTYPES", "QUANT_KV_DTYPES", "QuantizedKVCache", "dequantize_fp8",
           "dequantize_int8", "kv_bytes_per_element", "make_kv_cache", "quantize_fp8", "quantize_int8",
           "resolve_kv_dtype", "round_trip"]

FLOAT_KV_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
QUANT_KV_DTYPES = ("fp8_e4m3", "int8")
KV_DTYPES = ("auto", *FLOAT_KV_DTYPES, *QUANT_KV_DTYPES)
_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "fp8": "fp8_e4m3"}
FP8_MAX = 448.0  # largest finite float8_e4m3fn value
INT8_MAX = 127


def resolve_kv_dtype(name: str, compute_dtype: torch.dtype) -> str:
    """The canonical ``kv_dtype`` name for ``name`` (aliases ``bf16``, ``fp16``, ``fp32``, ``fp8``);
    ``"auto"`` becomes the name of ``compute_dtype``. Raises ValueError for an unknown name, with the
    closest known one."""
    key = _ALIASES.get(str(name).lower(), str(name).lower())
    if key == "auto":
        for k, dt in FLOAT_KV_DTYPES.items():
            if dt == compute_dtype:
                return k
        raise ValueError(f"compute dtype {compute_dtype} has no KV-cache name; pass kv_dtype explicitly")
    if key not in KV_DTYPES:
        close = difflib.get_close_matches(key, list(KV_DTYPES) + list(_ALIASES), n=1, cutoff=0.4)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"kv_dtype={name!r} is unknown; use one of {KV_DTYPES}.{hint}")
    return key


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric INT8 per vector: ``x`` ``[..., D]`` -> ``(q [..., D] int8, scale [...] float32)`` with
    ``scale = max |x| / 127`` over the last dim (a zero vector gets a tiny scale and codes 0) and
    ``q = clamp(round(x / scale), -127, 127)``. Round-to-nearest-even (``torch.round``)."""
    xf = x.float()
    scale = xf.abs().amax(-1).clamp_(min=1e-12) / INT8_MAX
    q = torch.round(xf / scale.unsqueeze(-1)).clamp_(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``q * scale`` (``q`` ``[..., D]`` int8, ``scale`` ``[...]`` float32) in ``dtype``."""
    return (q.float() * scale.unsqueeze(-1)).to(dtype)


def quantize_fp8(x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """``float8_e4m3fn`` codes of ``x / scale``, saturated to +-448 first (the cast itself would turn
    out-of-range values into NaN on some backends)."""
    return (x.float() / scale).clamp_(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)


def dequantize_fp8(q: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """``q * scale`` in ``dtype``."""
    return (q.float() * scale).to(dtype)


def round_trip(x: torch.Tensor, kv_dtype: str) -> torch.Tensor:
    """``x`` ``[..., D]`` stored in ``kv_dtype`` and read back, in ``x``'s dtype (the reference of what
    the cache does to one key or value vector). ``"auto"`` returns ``x`` unchanged."""
    name = resolve_kv_dtype(kv_dtype, x.dtype)
    if name in FLOAT_KV_DTYPES:
        return x.to(FLOAT_KV_DTYPES[name]).to(x.dtype)
    if name == "fp8_e4m3":
        return dequantize_fp8(quantize_fp8(x), 1.0, x.dtype)
    return dequantize_int8(*quantize_int8(x), x.dtype)


def kv_bytes_per_element(kv_dtype: str, head_dim: int, compute_dtype: torch.dtype = torch.bfloat16) -> float:
    """Stored bytes per cached key (or value) element, scales included: 4 / 2 for float32 / 16-bit
    floats, 1 for FP8, ``1 + 4 / head_dim`` for INT8 (one float32 scale per head vector)."""
    name = resolve_kv_dtype(kv_dtype, compute_dtype)
    if name in FLOAT_KV_DTYPES:
        return float(torch.empty(0, dtype=FLOAT_KV_DTYPES[name]).element_size())
    return 1.0 if name == "fp8_e4m3" else 1.0 + 4.0 / head_dim


class QuantizedKVCache:
    """Keys and values of every layer in a storage format other than the compute dtype.

    Storage ``k``, ``v`` ``[layers, max_batch, KV, S_cache, D]`` (float8_e4m3fn, int8 or a float type);
    for INT8 also ``k_scale``, ``v_scale`` ``[layers, max_batch, KV, S_cache]`` float32. Slot/column
    layout as the engine's own cache (:mod:`workbench.engine.engine`).
    """

    def __init__(self, kv_dtype: str, n_layers: int, max_batch: int, n_kv: int, s_cache: int, head_dim: int,
                 compute_dtype: torch.dtype, device: torch.device):
        self.kv_dtype = resolve_kv_dtype(kv_dtype, compute_dtype)
        self.compute_dtype, self.head_dim, self.n_layers, self.n_kv = compute_dtype, head_dim, n_layers, n_kv
        shape = (n_layers, max_batch, n_kv, s_cache, head_dim)
        store = {"fp8_e4m3": torch.float8_e4m3fn, "int8": torch.int8}.get(self.kv_dtype) \
            or FLOAT_KV_DTYPES[self.kv_dtype]
        self.k = torch.zeros(shape, dtype=store, device=device)
        self.v = torch.zeros(shape, dtype=store, device=device)
        self.k_scale = self.v_scale = None
        if self.kv_dtype == "int8":
            self.k_scale = torch.ones(shape[:-1], dtype=torch.float32, device=device)
            self.v_scale = torch.ones(shape[:-1], dtype=torch.float32, device=device)

    def tensors(self) -> list[torch.Tensor]:
        """Every storage tensor (each indexed ``[layer, slot, head, column, ...]``), for slot copies."""
        return [t for t in (self.k, self.v, self.k_scale, self.v_scale) if t is not None]

    @property
    def bytes_per_token(self) -> float:
        """Stored bytes per cached token over all layers, keys and values, scales included."""
        return kv_bytes_per_token(self.n_layers, self.n_kv, self.head_dim,
                                  kv_bytes_per_element(self.kv_dtype, self.head_dim, self.compute_dtype))

    def _encode(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.kv_dtype == "int8":
            return quantize_int8(x)
        if self.kv_dtype == "fp8_e4m3":
            return quantize_fp8(x), None
        return x.to(self.k.dtype), None

    def _decode(self, q: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
        if self.kv_dtype == "int8":
            return dequantize_int8(q, scale, self.compute_dtype)
        if self.kv_dtype == "fp8_e4m3":
            return dequantize_fp8(q, 1.0, self.compute_dtype)
        return q.to(self.compute_dtype)

    def write(self, layer: int, rows: torch.Tensor, cols: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store ``k``, ``v`` ``[B, T, KV, D]`` at slots ``rows`` and columns ``cols`` (both ``[B, T]`` int64)."""
        for store, scale, x in ((self.k, self.k_scale, k), (self.v, self.v_scale, v)):
            codes, s = self._encode(x)
            store[layer][rows, :, cols] = codes
            if s is not None:
                scale[layer][rows, :, cols] = s

    def read(self, layer: int, slots: torch.Tensor, kv_len: int, prefix: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Dequantized keys and values ``[B, KV, kv_len, D]`` (compute dtype) of ``slots`` ``[B]``;
        ``prefix``: the slots are ``0..B-1`` in order (a slice instead of a gather)."""
        out = []
        b = slots.shape[0]
        for store, scale in ((self.k, self.k_scale), (self.v, self.v_scale)):
            if prefix:
                q = store[layer, :b, :, :kv_len]
                s = None if scale is None else scale[layer, :b, :, :kv_len]
            else:
                q = store[layer, :, :, :kv_len].index_select(0, slots)
                s = None if scale is None else scale[layer, :, :, :kv_len].index_select(0, slots)
            out.append(self._decode(q, s))
        return out[0], out[1]

    def read_slot(self, slot: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of ``slot``'s first ``length`` positions, every layer, dequantized:
        ``[layers, KV, length, D]`` each, compute dtype (the payload of a slot transfer)."""
        out = []
        for store, scale in ((self.k, self.k_scale), (self.v, self.v_scale)):
            out.append(self._decode(store[:, slot, :, :length], None if scale is None else scale[:, slot, :, :length]))
        return out[0], out[1]

    def write_slot(self, slot: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store ``k``, ``v`` ``[layers, KV, L, D]`` (any float dtype) at ``slot``'s positions ``0..L-1``."""
        for store, scale, x in ((self.k, self.k_scale, k), (self.v, self.v_scale, v)):
            codes, sc = self._encode(x.to(store.device))
            store[:, slot, :, : x.shape[2]] = codes
            if sc is not None:
                scale[:, slot, :, : x.shape[2]] = sc

    def qkv_rope_write(self, layer: int, qkv, bias, cos, sin, wpos, slots, t: int, n_heads: int,
                       n_kv: int) -> torch.Tensor:
        """The engine's ``qkv_rope_cache`` for this cache: bias + RoPE (torch), then a quantizing write.
        ``qkv`` ``[B*T, (H+2*KV)*D]``, ``wpos`` ``[B*T]``, ``slots`` ``[B]``; returns q ``[B, KV, G*T, D]``
        with row ``g*T + t`` = head ``kv*G + g`` of token t (the layout attention expects)."""
        d, b, g = self.head_dim, slots.shape[0], n_heads // n_kv
        q, k, v = qkv_rope(qkv, bias, cos, sin, wpos, n_heads, n_kv, d)
        rows = slots.view(b, 1).expand(b, t)
        self.write(layer, rows, wpos.view(b, t), k.view(b, t, n_kv, d), v.reshape(b, t, n_kv, d))
        return q.view(b, t, n_kv, g, d).permute(0, 2, 3, 1, 4).reshape(b, n_kv, g * t, d)


def make_kv_cache(kv_dtype: str, n_layers: int, max_batch: int, n_kv: int, s_cache: int, head_dim: int,
                  compute_dtype: torch.dtype, device: torch.device) -> QuantizedKVCache | None:
    """A :class:`QuantizedKVCache`, or None when ``kv_dtype`` is the compute dtype (``"auto"``
    included): the engine then keeps its own cache tensors and fused kernels."""
    name = resolve_kv_dtype(kv_dtype, compute_dtype)
    if name in FLOAT_KV_DTYPES and FLOAT_KV_DTYPES[name] == compute_dtype:
        return None
    return QuantizedKVCache(name, n_layers, max_batch, n_kv, s_cache, head_dim, compute_dtype, device)
