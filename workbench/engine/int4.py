"""W4A16: group-wise asymmetric INT4 weights, bf16/float activations, and the matmul backends.

Format (the asymmetric RTN definition of :mod:`workbench.quant.rtn`), per row and per group of
``group_size`` consecutive input columns:

    scale = (max(w, 0) - min(w, 0)) / 15,  zero = round(-min(w, 0) / scale),
    q = clamp(round(w / scale) + zero, 0, 15),  w_hat = (q - zero) * scale

Any other W4 (or W2/W3: codes below 16) layout of :class:`workbench.quant.QuantLinear` maps onto it:
symmetric codes have ``zero = 2^(bits-1)``, float zero points are kept as floats, and partial or
non-kernel group sizes are expanded to a runtime group dividing both (see
:mod:`workbench.engine.weights`).

(Round-to-nearest baseline as in Frantar et al. 2022 GPTQ, arXiv 2210.17323, sec. 2; Lin et al. 2023
AWQ, arXiv 2306.00978, keeps the same storage format.)

Backends for ``y = x @ w_hat.T`` (which kernel runs each call: :mod:`workbench.engine.routing`, with the names
the route table uses in brackets):

* ``"dequant"`` -- dequantize to the activation dtype, then ``F.linear``; the reference [``dequant``].
* ``"tinygemm"`` -- ``torch.ops.aten._weight_int4pack_mm`` (CUDA, bf16), stores
  ``w_hat = (q - 8) * scale + (8 - zero) * scale`` [``tinygemm``].
* ``"triton:dequant"`` (the CUDA default), ``"triton:rows"``, ``"triton:tinygemm"`` -- few-row calls (decode
  batches, verify steps) on the package's kernels, in this order where they take the weight: the CUDA
  tensor-core kernel of :mod:`workbench.kernels.w4a16_mma` [``w4a16-mma``: bf16 / fp16, group 64 / 128 / 256,
  integer zeros; 1..``EngineConfig.w4a16_mma_rows`` rows where the Triton GEMM also takes the weight, and above
  that where a timing on this GPU picked it; else 2..64 rows], the Triton CUDA-core GEMV for one row
  [``triton-w4-gemv``, :mod:`workbench.kernels.w4a16`], the Triton tensor-core GEMM for <= 64 rows
  [``triton-w4-rows``, :mod:`workbench.kernels.rows`: a group that is a power of two >= 128 with integer zeros],
  tinygemm for 2..64 rows of a weight none of those takes [bf16; a second packing]. More rows (prefill) take the
  part after the colon: ``dequant`` dequantizes the packed weight on the device
  (:func:`workbench.kernels.int4_dequant.dequantize_packed`) and runs cuBLAS (compute-bound: on the H200 a
  512-token Qwen2-7B prefill took 18.9 ms against 154 ms in 64-row blocks of the Triton GEMM, ``"rows"``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

KERNELS = ("tinygemm", "triton")  # "triton" handles few rows only
SMALL_M = 1  # rows up to which the CUDA-core Triton GEMV is used where the tensor-core GEMM does not apply
ROWS_MAX = 64  # rows up to which the tensor-core GEMMs are used (workbench.kernels.rows.ROWS_MAX)
LARGE = ("tinygemm", "dequant", "rows")  # kernels for the rows the small one does not take
BACKENDS = ("dequant", "tinygemm", "triton:rows", "triton:tinygemm", "triton:dequant")


def _default_config():
    from workbench.engine.config import EngineConfig

    return EngineConfig()


# Per MMA row class (w4a16_mma.ROW_CLASSES): its first row count and the row count it is tuned at when the engine's
# batch reaches it (3 and 5: the verify steps of k = 2 and 4; 9: k = 8); a smaller batch tunes at the batch.
MMA_TUNE_ROWS = ((1, 1), (2, 3), (5, 5), (9, 9), (17, 17), (33, 33))


def mma_warmup_rows(max_m: int) -> list:
    """The row counts :meth:`Int4Linear.warmup` tunes the MMA kernel at for an engine of ``max_m`` rows a step: one per
    row class that ``max_m`` reaches (:data:`MMA_TUNE_ROWS`), at most ``max_m`` (and :data:`ROWS_MAX`). Speculative
    verify steps of a batch-1 engine (more rows than ``max_m``) are tuned at their first (uncaptured) call."""
    top = max(1, min(max_m, ROWS_MAX))
    return [min(tune, top) for first, tune in MMA_TUNE_ROWS if first <= top]


def tinygemm_inner_k_tiles(in_features: int) -> int:
    """The ``innerKTiles`` argument of ``torch.ops.aten._convert_weight_to_int4pack`` for a weight with
    ``in_features`` columns: the largest of 8, 4, 2 whose K tile (``innerKTiles * 16`` columns, torch's
    ``kKTileSize = 16``; ``aten/src/ATen/native/cuda/int4mm.cu``) divides ``in_features``. gpt-fast always
    passes 8, which refuses e.g. SmolLM2-135M's 576 columns (576 / 128 = 4.5); 4 takes them (576 / 64 = 9).

    Raises ``ValueError`` when ``in_features`` is not a multiple of 32 (the caller then pads ``in``, see
    :mod:`workbench.engine.runtime`)."""
    for tiles in (8, 4, 2):
        if in_features % (tiles * 16) == 0:
            return tiles
    raise ValueError(f"tinygemm needs in_features to be a multiple of 32, got {in_features}; pad the input "
                     f"columns to a multiple of 128 (workbench.engine.runtime does) or use backend 'dequant'")


def quantize_rtn_int4(weight: torch.Tensor, group_size: int = 128):
    """Round-to-nearest asymmetric INT4 of ``weight`` ``[out, in]`` (any float dtype): the package's RTN
    definition (:func:`workbench.quant.rtn.compute_qparams` and ``quantize_codes`` with ``bits=4``,
    ``symmetric=False``, ``scale_dtype=weight.dtype``), number for number:

        lo = min(min w, 0),  hi = max(max w, 0),  scale = (hi - lo) / 15 (rounded to weight's dtype;
        a zero scale becomes that dtype's eps),  zero = clamp(round(-lo / scale), 0, 15),
        q = clamp(round(w / scale) + zero, 0, 15)          (torch.round: half to even)

    ``tests/quant/test_runtime.py`` checks the equality; it is written out here because the engine does
    not import :mod:`workbench.quant` (which builds on the engine).

    Returns ``(q, scales, zeros)``: ``q`` ``[out, in]`` uint8 in 0..15, ``scales`` and ``zeros``
    ``[out, in // group_size]`` in weight's dtype (zeros integer-valued). Statistics are computed in
    float32. Raises ValueError if ``in`` is not a multiple of ``group_size``.
    """
    out_f, in_f = weight.shape
    if group_size <= 0 or in_f % group_size:
        raise ValueError(f"group_size={group_size} must divide in_features={in_f}; pick a divisor such as 32, 64 or 128")
    w = weight.float().reshape(out_f, in_f // group_size, group_size)
    lo = w.amin(-1).clamp(max=0)
    hi = w.amax(-1).clamp(min=0)
    scale = (hi - lo) / 15
    scale = torch.where(scale == 0, torch.full_like(scale, torch.finfo(weight.dtype).eps), scale)
    scale = scale.to(weight.dtype).float()  # the codes are the nearest ones for the scale stored
    zero = torch.round(-lo / scale).clamp(0, 15)
    q = torch.clamp(torch.round(w / scale.unsqueeze(-1)) + zero.unsqueeze(-1), 0, 15)
    return q.reshape(out_f, in_f).to(torch.uint8), scale.to(weight.dtype), zero.to(weight.dtype)


def dequantize_int4(q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor,
                    dtype: torch.dtype | None = None) -> torch.Tensor:
    """``w_hat = (q - zero) * scale`` groupwise; ``q`` ``[out, in]``, scales/zeros ``[out, in // g]``.
    Computed in float32, returned in ``dtype`` (default: scales' dtype)."""
    g = q.shape[1] // scales.shape[1]
    s = scales.float().repeat_interleave(g, dim=1)
    z = zeros.float().repeat_interleave(g, dim=1)
    return ((q.float() - z) * s).to(dtype or scales.dtype)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """``[out, in // 2]`` uint8 (element ``2j`` in the low nibble, ``2j+1`` in the high) -> ``[out, in]``."""
    lo = packed & 0x0F
    hi = packed >> 4
    return torch.stack((lo, hi), dim=-1).reshape(packed.shape[0], -1)


class Int4Linear:
    """``y = x @ w_hat.T`` for one W4A16 weight through a chosen backend.

    Args: ``q`` ``[out, in]`` uint8 (0..15) or packed ``[out, in // 2]`` uint8; ``scales``, ``zeros``
    ``[out, in // group_size]``; ``dtype`` the activation dtype; ``backend`` one of :data:`BACKENDS`.
    ``x`` ``[N, in]`` -> ``[N, out]``. Raises ValueError for an unknown backend or bad shapes.
    """

    def __init__(self, q, scales, zeros, dtype: torch.dtype, backend: str = "dequant", device=None, config=None):
        small, _, large = backend.partition(":")
        large = large or small
        bad = small not in KERNELS or large not in LARGE or (large == "rows" and small != "triton")
        if backend != "dequant" and bad:
            raise ValueError(f"backend={backend!r} unknown; use 'dequant', one of {KERNELS[:2]}, or "
                             f"'small:large' with small in {KERNELS} and large in {LARGE} ('rows' after 'triton')")
        device = torch.device(device) if device is not None else q.device
        self.cfg = config or _default_config()  # the engine's EngineConfig: which kernels routing may choose
        self.tuning: dict = {}  # route measurements; the engine replaces it with its own dict (Engine.tuning)
        n_groups = scales.shape[1]
        if scales.shape != zeros.shape or scales.shape[0] != q.shape[0] or q.shape[1] % n_groups:
            raise ValueError(f"shapes q {tuple(q.shape)}, scales {tuple(scales.shape)}, zeros "
                             f"{tuple(zeros.shape)} do not match [out, in] / [out, in // group_size]")
        self.out_features = q.shape[0]
        self.in_features = q.shape[1]
        self.group_size = self.in_features // n_groups
        if q.dtype != torch.uint8:
            raise ValueError(f"q must be uint8, got {q.dtype}")
        self.backend = backend
        self.dtype = dtype
        q = q.to(device)
        scales = scales.to(device=device, dtype=dtype)
        zeros = zeros.to(device=device, dtype=dtype)
        self.small, self.large = small, large
        self.small_rows = SMALL_M  # rows the small kernel takes
        self.mid = None  # a kernel for small_rows < M <= ROWS_MAX rows before the large one (tinygemm)
        self.tc = False  # the tensor-core GEMM applies (workbench.kernels.rows)
        self.mma = False  # the CUDA kernel of workbench.kernels.w4a16_mma applies (which rows: _mma_rows)
        if "dequant" in (small, large) and small != "triton":  # "triton:dequant" dequantizes from its packed words
            self.q, self.scales, self.zeros = q, scales, zeros
        if backend == "dequant":
            return
        if small == "triton":
            from workbench.kernels import rows
            from workbench.kernels.int4_layout import pack_int4_gemv

            g = self.group_size
            self.tc = self.cfg.enabled("triton-w4-rows") and rows.int4_supported(g, zeros, dtype)
            if not self.tc and (g < 32 or g & (g - 1)):
                raise ValueError(f"backend {backend!r}: the Triton kernels need a group_size that is a power of two "
                                 f">= 32, got {g}")
            self.qw = pack_int4_gemv(q, g)  # [N, K // 8] int32, shuffled within each group
            self.s_t = scales.t().contiguous()  # [K // G, N]
            self.z_t = zeros.t().contiguous()  # [K // G, N]
            self.int_zero = bool(torch.equal(zeros, zeros.round()))  # exact fast path for integer zeros
            self.small_rows = ROWS_MAX if self.tc else SMALL_M
            if large == "rows" and not self.tc:  # the tensor-core GEMM does not take this weight
                self.large = large = "tinygemm"
            self.mma = self._mma_applies(device, zeros)
            if (large == "dequant" and not self.tc and not self.mma and self.cfg.enabled("tinygemm") and device.type == "cuda"
                    and dtype == torch.bfloat16 and g <= 256):  # tinygemm takes groups of 32..256
                self.mid = "tinygemm"
        if "tinygemm" in (small, large):
            self._pack_tinygemm(q, scales, zeros)
        elif self.mid == "tinygemm":
            try:  # a second copy for 2..ROWS_MAX rows: without it those rows dequantize (slower, still exact)
                self._pack_tinygemm(q, scales, zeros)
            except (RuntimeError, ValueError):
                self.mid = None

    def _mma_applies(self, device: torch.device, zeros: torch.Tensor) -> bool:
        """``w4a16-mma`` enabled, CUDA, and :mod:`workbench.kernels.w4a16_mma` takes this weight and is available
        (its first use on a machine compiles it, printed)."""
        if not self.cfg.enabled("w4a16-mma") or device.type != "cuda":
            return False
        from workbench.kernels import w4a16_mma

        return (w4a16_mma.supported(self.out_features, self.in_features, self.group_size, self.dtype, zeros)
                and w4a16_mma.available(device))

    def _mma_cfg(self, x: torch.Tensor) -> tuple:
        """The MMA kernel's configuration for ``x``'s row class: tuned (once per shape and class, on CUDA outside
        graph capture; the residual epilogue takes the same), else the default."""
        from workbench.kernels import w4a16_mma as mm

        m = x.shape[0]
        key = mm.key(self.out_features, self.in_features, m, self.group_size, x.dtype, False)
        cfg = mm._BEST.get(key)
        if cfg is None and self._can_tune(x):
            cfg = mm.tune(x[:, :self.in_features].contiguous(), self.qw, self.s_t, self.z_t, self.group_size,
                          self.out_features)
        return cfg or mm.default_cfg(self.out_features, self.in_features, m, self.group_size)

    def _mma_rows(self, m: int) -> bool:
        """``m`` rows go through the MMA kernel: 1..``EngineConfig.w4a16_mma_rows`` where the Triton tensor-core GEMM takes
        the weight, else 2..64 (one row stays on the fused CUDA-core GEMV, which on the H200 made SmolLM2-135M's
        batch-1 step 0.515 ms against 0.752 unfused: :data:`workbench.engine.dispatch.INT4_ONE_ROW_FUSED`)."""
        if not self.mma:
            return False
        return m <= self.cfg.w4a16_mma_rows if self.tc else 2 <= m <= ROWS_MAX

    def _plain_key(self, m: int) -> tuple:
        from workbench.kernels import w4a16_mma as mm

        return mm.key(self.out_features, self.in_features, m, self.group_size, self.dtype, True)

    def _plain_mma(self, m: int) -> bool:
        """A call of ``m`` rows without prologue or RoPE goes through the MMA kernel: :meth:`_mma_rows`, or (rows
        above ``w4a16_mma_rows`` of a tensor-core weight) where :meth:`warmup` measured it faster than the Triton
        GEMM for this shape and row class (recorded in ``self.tuning``, the engine's)."""
        if self._mma_rows(m):
            return True
        return (self.mma and self.tc and self.cfg.w4a16_mma_rows < m <= ROWS_MAX
                and self.tuning.get(self._plain_key(m), False))

    def _route_plain(self, m: int) -> bool:
        """Time the MMA kernel (tuned) and the Triton GEMM for ``m`` rows with a residual epilogue, weights rotated
        over enough copies that L2 holds none (:func:`workbench.kernels.timing.fastest_config`); record whether the
        MMA kernel won in ``self.tuning`` and return it. CUDA, outside graph capture."""
        from workbench.kernels import rows
        from workbench.kernels import w4a16_mma as mm
        from workbench.kernels.timing import fastest_config, weight_copies

        kk = self._plain_key(m)
        if kk in self.tuning:
            return self.tuning[kk]
        dev = self.qw.device
        x = torch.randn(m, self.in_features, device=dev, dtype=self.dtype)
        res = torch.randn(m, self.out_features, device=dev, dtype=self.dtype)
        plain = mm.key(self.out_features, self.in_features, m, self.group_size, self.dtype, False)
        cfg = mm._BEST.get(plain)  # the configuration _mma_cfg will use
        if cfg is None:
            cfg = mm._BEST[plain] = mm.tune(x, self.qw, self.s_t, self.z_t, self.group_size, self.out_features, res)
        ws = weight_copies((self.qw, self.s_t, self.z_t))
        ref = mm.reference(x, self.qw, self.s_t, self.z_t, self.group_size, res)

        def run(w, which):
            if which == "mma":
                return mm.gemm(x, *w, self.group_size, self.out_features, res, cfg)
            return rows.gemm_int4(x, *w, self.group_size, self.out_features, residual=res)

        self.tuning[kk] = fastest_config(["mma", "rows"], run, ws, ref, {}, f"W4A16 {m}-row route") == "mma"
        return self.tuning[kk]

    def _mma(self, x: torch.Tensor, residual=None, act: str = "none") -> torch.Tensor:
        from workbench.kernels import w4a16_mma

        return w4a16_mma.gemm(x, self.qw, self.s_t, self.z_t, self.group_size, self.out_features, residual,
                              self._mma_cfg(x), act=act)

    def swiglu_epilogue(self, m: int) -> bool:
        """:meth:`swiglu` of ``m`` rows runs as one MMA launch with the SwiGLU epilogue: ``w4a16-mma-swiglu`` on,
        an even number of rows of 16-row tiles (``out % 16 == 0``), and the MMA kernel takes ``m`` plain rows
        (:meth:`_plain_mma`)."""
        return self.cfg.enabled("w4a16-mma-swiglu") and self.out_features % 16 == 0 and self._plain_mma(m)

    def swiglu(self, x: torch.Tensor, silu_mul) -> torch.Tensor:
        """``silu_mul(self(x))`` for a gate_up weight (rows ``[gate | up]``): ``x`` ``[M, in]`` in the weight's
        dtype -> ``[M, out // 2]``. Where :meth:`swiglu_epilogue`, one launch of the MMA kernel with the SwiGLU
        epilogue (:func:`workbench.kernels.w4a16_mma.gemm` ``act="swiglu"``: the same rounding as the engine's
        ``silu_mul``, HF's ``act_fn(gate) * up``); otherwise this matmul, then ``silu_mul`` (the engine's op,
        ``[M, 2 I] -> [M, I]``)."""
        if x.dtype == self.dtype and self.swiglu_epilogue(x.shape[0]):
            return self._mma(x, act="swiglu")
        return silu_mul(self(x))

    def _pack_tinygemm(self, q, scales, zeros) -> None:
        packed = ((q[:, ::2] << 4) | q[:, 1::2]).contiguous()
        self.packed = torch.ops.aten._convert_weight_to_int4pack(packed, tinygemm_inner_k_tiles(self.in_features))
        sz = torch.stack((scales, (8 - zeros) * scales), dim=-1)  # [out, G, 2]
        self.scales_and_zeros = sz.transpose(0, 1).contiguous()  # [G, out, 2]

    @classmethod
    def from_quantized(cls, qweight, scales, zeros, dtype, backend="dequant", device=None,
                       in_features: int | None = None, config=None):
        """Accept ``qweight`` unpacked ``[out, in]`` (any integer dtype, values 0..15) or packed
        ``[out, in // 2]`` uint8 (see :func:`unpack_int4`; recognised when ``in_features`` is given and
        equals twice its width)."""
        if in_features is not None and qweight.shape[1] * 2 == in_features:
            qweight = unpack_int4(qweight.to(torch.uint8))
        return cls(qweight.to(torch.uint8), scales, zeros, dtype, backend, device, config)

    def nbytes(self) -> int:
        """Bytes read per matmul: 4-bit weights plus scales and zeros (2 bytes each per group). Held in memory:
        twice that where ``mid == "tinygemm"`` (a second packing; the runtime label says so)."""
        return self.out_features * self.in_features // 2 + 2 * self.out_features * (
            self.in_features // self.group_size) * torch.empty(0, dtype=self.dtype).element_size()

    def _tune(self, x):
        from workbench.kernels import w4a16

        return w4a16.tune(x, self.qw, self.s_t, self.z_t, self.group_size, self.out_features, self.int_zero)

    def warmup(self, max_m: int = 4) -> None:
        """Tune (and compile) the CUDA-core Triton GEMV for every row count 1..``max_m`` now, and the MMA kernel
        for each of its row classes up to ``max_m`` rows, outside graph capture, so that a later capture uses tuned
        configurations. No-op for other backends, off CUDA, or where
        the tensor-core GEMM takes one-row calls too (it launches a default configuration unless
        :func:`workbench.kernels.rows.tune` ran)."""
        if self.small != "triton" or self.qw.device.type != "cuda":
            return
        if self.mma:  # one tuning per row class (w4a16_mma.ROW_CLASSES), at the rows of mma_warmup_rows
            for m in mma_warmup_rows(max_m):
                if self._mma_rows(m):
                    self._mma_cfg(torch.randn(m, self.in_features, device=self.qw.device, dtype=self.dtype))
            if self.tc:  # plain calls above w4a16_mma_rows: timed per class, at its largest row count
                for m in (16, 32, 64):
                    if self.cfg.w4a16_mma_rows < m <= min(max_m, ROWS_MAX):
                        self._route_plain(m)
        if not self.one_row_gemv():
            return
        from workbench.kernels import w4a16

        for m in range(1, min(max_m, SMALL_M) + 1):
            if self._key(m) not in w4a16._BEST:
                self._tune(torch.randn(m, self.in_features, device=self.qw.device, dtype=self.dtype))

    def _key(self, m: int, dtype: torch.dtype | None = None) -> tuple:
        from workbench.kernels import w4a16

        return w4a16.gemv_key(self.out_features, self.in_features, m, self.group_size, self.int_zero,
                              dtype or self.dtype)

    def _gemv_ok(self) -> bool:
        g = self.group_size
        return g >= 32 and not g & (g - 1)

    def one_row_gemv(self) -> bool:
        """One-row calls (plain and :meth:`fused`) run the CUDA-core GEMV of :mod:`workbench.kernels.w4a16`:
        the ``triton`` backend, a power-of-two group >= 32, ``triton-w4-gemv`` enabled, and the MMA kernel not
        taking one row (on the H200 the GEMV beat the Triton tensor-core GEMM at one row on every Qwen2-7B /
        Llama-3-8B matmul)."""
        return (self.small == "triton" and not self._mma_rows(1) and self._gemv_ok()
                and self.cfg.enabled("triton-w4-gemv"))

    def fused_max_rows(self) -> int:
        """Rows up to which :meth:`fused` runs: 64 where the MMA kernel or the tensor-core GEMM applies, 1 where
        only the one-row GEMV does, 0 where no fused kernel takes this weight."""
        if self.small != "triton":
            return 0
        return ROWS_MAX if self.tc or self.mma else int(self._gemv_ok())

    def _gemv_cfg(self, x: torch.Tensor):
        """The GEMV launch configuration for ``x`` ``[M, in]``: tuned for ``(out, in, M)``, else tuned now (CUDA,
        outside graph capture), else the default."""
        from workbench.kernels import w4a16

        cfg = w4a16._BEST.get(self._key(x.shape[0], x.dtype))
        if cfg is None:
            cfg = (w4a16.DEFAULT if x.device.type != "cuda" or torch.cuda.is_current_stream_capturing()
                   else self._tune(x))
        return cfg

    @staticmethod
    def _can_tune(x: torch.Tensor) -> bool:
        """Tuning times CUDA graphs: on CUDA, outside graph capture."""
        return x.device.type == "cuda" and not torch.cuda.is_current_stream_capturing()

    def _fused_cfg(self, x, prologue, norm_weight, eps, residual, rope):
        """The launch configuration of a one-row fused GEMV call: tuned for the call itself
        (:func:`workbench.kernels.w4a16.tune_fused`, on CUDA outside graph capture, once per
        :func:`~workbench.kernels.w4a16.fused_key`: shape, group, zero path, dtype and fusions), else the plain
        GEMV's (:meth:`_gemv_cfg`)."""
        from workbench.kernels import w4a16

        key = w4a16.fused_key(self.out_features, self.in_features, self.group_size, self.int_zero, x.dtype, prologue,
                              residual is not None, rope)
        cfg = w4a16._BEST.get(key)
        if cfg is None and self._can_tune(x):
            cfg = w4a16.tune_fused(x, self.qw, self.s_t, self.z_t, self.group_size, self.out_features, prologue,
                                   norm_weight, eps, residual, rope, self.int_zero)
        return cfg or self._gemv_cfg(x[:, :self.in_features])

    def fused(self, x: torch.Tensor, prologue: str = "none", norm_weight=None, eps: float = 1e-6, residual=None,
              rope=None) -> torch.Tensor:
        """``f(x) @ w_hat.T (+ residual)`` with the engine's neighbouring operations fused in: ``prologue``
        "none" / "rmsnorm" / "swiglu", a residual, or for one row the qkv bias + RoPE + KV-cache write ``rope``.
        One row where :meth:`one_row_gemv`: :func:`workbench.kernels.w4a16.gemv_fused` (CUDA cores); otherwise
        :func:`workbench.kernels.rows.gemm_int4` (tensor cores). ``x`` ``[M, in]`` (``[M, 2 * in]`` for
        "swiglu"), ``M <= fused_max_rows()``. Raises ``ValueError`` where no fused kernel applies."""
        if x.shape[0] > self.fused_max_rows():
            raise ValueError(f"no fused kernel for {x.shape[0]} rows (backend {self.backend!r}, group_size "
                             f"{self.group_size}); check fused_max_rows() first")
        if prologue == "none" and rope is None and x.dtype == self.dtype and self._plain_mma(x.shape[0]):
            return self._mma(x, residual)
        if self.mma and not self.tc and not (x.shape[0] == 1 and self._gemv_ok()):
            raise ValueError(f"the MMA kernel takes no prologue or RoPE epilogue (got {prologue!r}, rope="
                             f"{rope is not None}) and no Triton kernel takes {x.shape[0]} rows of group "
                             f"{self.group_size}: run the prologue first (dispatch does so for MMA weights)")
        if x.shape[0] == 1 and self.one_row_gemv():
            from workbench.kernels import w4a16

            cfg = self._fused_cfg(x, prologue, norm_weight, eps, residual, rope)
            return w4a16.gemv_fused(x, self.qw, self.s_t, self.z_t, self.group_size, self.out_features, prologue,
                                    norm_weight, eps, residual, rope, cfg, self.int_zero)
        from workbench.kernels import rows

        return rows.gemm_int4(x, self.qw, self.s_t, self.z_t, self.group_size, self.out_features, prologue,
                              norm_weight, eps, residual, rope=rope)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.backend == "dequant":
            return F.linear(x, dequantize_int4(self.q, self.scales, self.zeros, x.dtype))
        m = x.shape[0]
        if x.dtype == self.dtype and self._plain_mma(m):  # (other activation dtypes: the Triton kernels)
            return self._mma(x)
        kernel = self.small if m <= self.small_rows else self.mid if self.mid and m <= ROWS_MAX else self.large
        if kernel == "triton" and self.tc and not (x.shape[0] == 1 and self.one_row_gemv()):
            return self.fused(x)
        if kernel == "triton":
            from workbench.kernels import w4a16

            return w4a16.gemv(x, self.qw, self.s_t, self.z_t, self.group_size, self.out_features, self._gemv_cfg(x),
                              self.int_zero)
        if kernel == "rows":  # blocks of ROWS_MAX rows through the tensor-core GEMM (rows are independent)
            return torch.cat([self.fused(x[i:i + ROWS_MAX]) for i in range(0, x.shape[0], ROWS_MAX)])
        if kernel == "dequant" and self.small == "triton":  # the dense copy lives for this matmul only
            from workbench.kernels.int4_dequant import dequantize_packed

            return F.linear(x, dequantize_packed(self.qw, self.s_t, self.z_t, self.group_size, x.dtype))
        if kernel == "dequant":
            return F.linear(x, dequantize_int4(self.q, self.scales, self.zeros, x.dtype))
        return torch.ops.aten._weight_int4pack_mm(x.contiguous(), self.packed, self.group_size,
                                                  self.scales_and_zeros)

    def route(self, m: int) -> tuple[str, str]:
        """``(kernel, why)`` of a plain call of ``m`` rows, as :meth:`__call__` dispatches it (the route table's
        row; names of :mod:`workbench.engine.routing`)."""
        if self.backend == "dequant":
            return "dequant", getattr(self, "route_why", "") or "backend 'dequant'"
        if self._plain_mma(m):
            return "w4a16-mma", ("measured faster than the Triton GEMM here" if not self._mma_rows(m) else
                                 f"{m} rows in its range")
        kernel = self.small if m <= self.small_rows else self.mid if self.mid and m <= ROWS_MAX else self.large
        if kernel == "triton":
            if self.tc and not (m == 1 and self.one_row_gemv()):
                return "triton-w4-rows", "w4a16-mma does not take these rows" if self.mma else "w4a16-mma unavailable"
            return "triton-w4-gemv", "one row"
        if kernel == "rows":
            return "triton-w4-rows", f"{m} rows in blocks of {ROWS_MAX}"
        if kernel == "dequant":
            return "dequant", f"{m} rows: dequantized on the device per call, then cuBLAS (compute-bound)"
        return "tinygemm", f"{m} rows, no tensor-core kernel takes group {self.group_size}"
