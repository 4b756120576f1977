"""Engine weights: fused per-layer tensors taken from an HF model, or random-initialised on device.

Per layer the engine keeps ``wqkv = [Wq; Wk; Wv]`` ``[(H+2*KV)*D, hidden]`` and
``wgu = [W_gate; W_up]`` ``[2*I, hidden]`` so one decode layer runs four matmuls. Each matmul is a
:class:`Dense` (float/bf16 weight), an :class:`workbench.engine.int4.Int4Linear` (W4A16, also W2/W3
codes) or an :class:`workbench.engine.int8.Int8Linear` (W8A16, W5-W7), possibly behind an AWQ input
scale (:class:`workbench.engine.runtime.InputScaled`).

A model whose Linears are quantized (``workbench.quant.QuantLinear``: RTN, AWQ or GPTQ output) runs on
the quantized matmuls built from its codes (:mod:`workbench.engine.runtime`); ``ModelWeights.labels``
names the matmul each weight got, and a weight the runtime cannot run stays dense, with a warning and
a label saying why.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from workbench.engine.int4 import Int4Linear, quantize_rtn_int4
from workbench.engine.runtime import InputScaled, cpu_int4_linear, fuse_params, quant_matmul, quant_params_of

QUANT_RUNTIMES = ("auto", "kernels", "cached", "dense")  # how a quantized model's Linears run (weights_from_hf)


def _default_config():
    from workbench.engine.config import EngineConfig

    return EngineConfig()


class Dense:
    """``y = x @ w.T`` for ``w`` ``[out, in]``: ``F.linear`` (cuBLAS), or for ``EngineConfig.dense_mma_rows`` rows
    on CUDA the dense MMA kernel (``dense-mma``; its configuration tuned once per shape and row class, outside graph
    capture) where :meth:`_route` measured it faster than cuBLAS for this shape (on the H200, Qwen2-7B: 5% faster
    per layer at 2..8 rows, slower from 16; ``benchmarks/results/h200_2026-12-03*/``). It runs only where the
    library is already built: a bf16 model never compiles it (``python -m workbench.kernels.build`` prebuilds)."""

    def __init__(self, w: torch.Tensor):
        self.w = w
        self._mma: bool | None = None  # the kernel takes this weight here (decided at the first few-row call)
        self.tuning: dict = {}  # route measurements; the engine replaces it with its own dict (Engine.tuning)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        m = x.numel() // max(1, x.shape[-1])
        lo, hi = self.cfg.dense_mma_rows
        if lo <= m <= hi and x.is_cuda and x.dtype == self.w.dtype and self.cfg.enabled("dense-mma"):
            if self._mma is None:
                self._mma = self._mma_applies()
            if self._mma and self._route(m):
                return self._mma_call(x.reshape(m, x.shape[-1])).reshape(*x.shape[:-1], self.w.shape[0])
        return F.linear(x, self.w)

    @property
    def cfg(self):
        """The engine's :class:`~workbench.engine.config.EngineConfig` (set by the engine; the defaults before)."""
        return self.__dict__.get("engine_config") or _default_config()

    def route(self, m: int) -> tuple[str, str]:
        """``(kernel, why)`` of a plain call of ``m`` rows (the route table's row; the engine's fused steps route
        in :mod:`workbench.engine.dispatch`)."""
        from workbench.engine.routing import Problem, choose

        dev = self.w.device.type
        name, why = choose("dense", Problem(self.w.shape[0], self.w.shape[1], m, 0, self.w.dtype, dev), self.cfg)
        if name in ("triton-gemv", "triton-rows"):  # these run in the fused steps only (Engine.route_table)
            name, why = "torch-linear", f"{name} runs in fused steps only"
        if name == "dense-mma":
            rows = min(8 * -(-m // 8), self.cfg.dense_mma_rows[1])
            won = self.tuning.get(("dense", self.w.shape[0], self.w.shape[1], rows, str(self.w.dtype)))
            if self._mma is False or won is None or not won:
                why = ("library not built (a bf16 model never compiles it: python -m workbench.kernels.build)"
                       if self._mma is False else "not measured yet" if won is None else "cuBLAS measured faster")
                return "torch-linear", f"dense-mma eligible; {why}"
            return name, "measured faster than cuBLAS on this GPU"
        return name, why

    def _route(self, m: int) -> bool:
        """Whether calls of ``m`` rows take the dense MMA kernel: the kernel (tuned) timed against cuBLAS once per
        shape and row class, at the class's largest row count within ``EngineConfig.dense_mma_rows``, with the weight
        rotated over enough copies that L2 holds none (:func:`workbench.kernels.timing.fastest_config`); recorded in
        ``self.tuning`` (the engine's ``Engine.tuning``). Inside CUDA-graph capture, without a measurement: False (cuBLAS), not cached. A kernel
        that fails to tune or launch here (``RuntimeError``) routes the class to cuBLAS, with a warning."""
        from workbench.kernels import w4a16_mma as mm
        from workbench.kernels.timing import fastest_config, weight_copies

        n, k = self.w.shape
        rows = min(8 * mm.m_tiles(m), self.cfg.dense_mma_rows[1])
        key = mm.dense_key(n, k, rows, self.w.dtype, False)
        tkey = ("dense", n, k, rows, str(self.w.dtype))
        if tkey in self.tuning:
            return self.tuning[tkey]
        if torch.cuda.is_current_stream_capturing():
            return False
        x = torch.randn(rows, k, device=self.w.device, dtype=self.w.dtype)
        try:
            cfg = mm._DENSE_BEST.get(key) or mm.dense_tune(x, self.w)  # (the configuration _mma_call will use)
            ws = weight_copies((self.w,))
            ref = F.linear(x, self.w).float()  # (no float32 copy of the weight: an lm_head's would be GBs)

            def run(wi, which):
                return mm.dense_gemm(x, wi[0], None, cfg) if which == "mma" else F.linear(x, wi[0])

            won = fastest_config(["mma", "cublas"], run, ws, ref, None, f"bf16 {rows}-row route") == "mma"
        except RuntimeError as e:
            warnings.warn(f"dense MMA kernel off for N={n}, K={k}, {rows} rows (cuBLAS instead): {str(e)[:200]}",
                          stacklevel=3)
            won = False
        self.tuning[tkey] = won
        return won

    def _mma_applies(self) -> bool:
        from workbench.kernels import w4a16_mma as mm

        n, k = self.w.shape
        return (self.w.is_cuda and self.w.is_contiguous() and mm.dense_supported(n, k, self.w.dtype)
                and mm.available(self.w.device, build=False))  # a bf16 model never compiles the library

    def _mma_call(self, x: torch.Tensor) -> torch.Tensor:
        from workbench.kernels import w4a16_mma as mm

        n, k = self.w.shape
        cfg = mm._DENSE_BEST.get(mm.dense_key(n, k, x.shape[0], x.dtype, False))
        if cfg is None and not torch.cuda.is_current_stream_capturing():
            cfg = mm.dense_tune(x.contiguous(), self.w)
        return mm.dense_gemm(x, self.w, None, cfg)

    def warmup(self, max_m: int = 4) -> None:
        """Measure the route (:meth:`_route`) and tune the dense MMA kernel now for each row class of
        ``EngineConfig.dense_mma_rows``, outside graph capture, whatever ``max_m`` (the engine's batch): verify steps of
        speculative decoding take up to 9 rows at batch 1. No-op off CUDA or where the kernel is off or does not
        apply."""
        if not self.cfg.enabled("dense-mma") or not self.w.is_cuda:
            return
        for m in (2, 9, 17, 33):  # one call per row class: __call__ decides whether the kernel applies and routes it
            if self.cfg.dense_mma_rows[0] <= m <= self.cfg.dense_mma_rows[1]:
                self(torch.randn(m, self.w.shape[1], device=self.w.device, dtype=self.w.dtype))

    def nbytes(self) -> int:
        return self.w.numel() * self.w.element_size()


@dataclass
class LayerWeights:
    """One decoder block; ``bqkv``/``bo`` are None when the model has no attention bias."""

    ln1: torch.Tensor  # [hidden]
    wqkv: object  # Dense | Int4Linear, out (H+2KV)*D
    bqkv: torch.Tensor | None  # [(H+2KV)*D]
    wo: object  # out hidden, in H*D
    bo: torch.Tensor | None
    ln2: torch.Tensor  # [hidden]
    wgu: object  # out 2*I
    wd: object  # out hidden, in I


@dataclass
class ModelWeights:
    embed: torch.Tensor  # [vocab, hidden]
    layers: list
    norm: torch.Tensor  # [hidden]
    lm_head: object  # Dense | Int4Linear | Int8Linear, out vocab
    labels: dict = field(default_factory=dict)  # matmul name ("layers.0.qkv", "lm_head") -> runtime label

    def matmuls(self) -> list:
        """Every matmul weight (Dense or Int4Linear): per layer qkv, o, gate_up, down; then lm_head."""
        return [m for lw in self.layers for m in (lw.wqkv, lw.wo, lw.wgu, lw.wd)] + [self.lm_head]

    def nbytes_per_step(self) -> int:
        """Weight bytes one decode step reads: every matmul weight, norms, biases (not the embedding
        table, of which one row per token is read, unless lm_head is tied to it)."""
        total = self.lm_head.nbytes() + self.norm.numel() * self.norm.element_size()
        for lw in self.layers:
            for m in (lw.wqkv, lw.wo, lw.wgu, lw.wd):
                total += m.nbytes()
            for t in (lw.ln1, lw.ln2, lw.bqkv, lw.bo):
                total += 0 if t is None else t.numel() * t.element_size()
        return total


def make_linear(w: torch.Tensor, quant, dtype, backend: str, group_size: int, config=None):
    """A Dense for ``w``, or an Int4Linear from ``quant`` = ``(q, scales, zeros)`` / RTN of ``w`` (``config``: the
    engine's ``EngineConfig``)."""
    if quant == "rtn":
        quant = quantize_rtn_int4(w, group_size)
    if quant is None:
        return Dense(w.to(dtype))
    q, s, z = quant
    if backend == "dequant" and (w.device if w is not None else q.device).type == "cpu":  # the CPU: torch's INT4 kernel where it runs
        if w is not None and q.shape[1] * 2 == w.shape[1]:
            from workbench.engine.int4 import unpack_int4

            q = unpack_int4(q.to(torch.uint8))
        return cpu_int4_linear(q.to(torch.uint8), s, z, dtype, config)
    return Int4Linear.from_quantized(q, s, z, dtype, backend, w.device if w is not None else None,
                                     in_features=w.shape[1] if w is not None else None, config=config)


def _quant_entry(entry):
    if isinstance(entry, dict):
        return entry["qweight"], entry["scales"], entry["zeros"]
    return tuple(entry)


def _fused_quant(qdict, names, in_features):
    """Concatenate the (q, scales, zeros) of several Linears along the output dim."""
    if qdict is None or qdict == "rtn":
        return qdict
    have = [n in qdict for n in names]
    if not any(have):
        return None
    if not all(have):
        raise ValueError(f"w4a16 dict quantizes only some of {names}; quantize all or none of them")
    parts = []
    for n in names:
        q, s, z = _quant_entry(qdict[n])
        if q.shape[1] * 2 == in_features:
            from workbench.engine.int4 import unpack_int4

            q = unpack_int4(q.to(torch.uint8))
        parts.append((q.to(torch.uint8), s, z))
    return tuple(torch.cat([p[i] for p in parts], 0) for i in range(3))


def _dense(linear) -> torch.Tensor:
    """``[out, in]`` weight a Linear applies to its raw input: ``nn.Linear.weight``, or for a
    :class:`workbench.quant.QuantLinear` its dequantized ``W_hat / input_scale`` (``effective_weight``)."""
    eff = getattr(linear, "effective_weight", None)
    return eff() if callable(eff) else linear.weight


def _runtime(mods: list, dtype, device, backend: str, key: str, labels: dict, cache: bool = False,
             row_scale: dict | None = None, config=None):
    """The engine matmul for the Linears ``mods`` fused along ``out`` and the AWQ input scale left for
    the caller (``None`` if none): quantized matmuls when every module is quantized and they fuse,
    else the dense (dequantized, AWQ scale included) weight with a warning unless all are float.

    ``row_scale``: ``{index into mods: r [out] float32}``, each output row ``o`` of that module multiplied by
    ``r[o]`` (its group scales, so the codes are unchanged: ``W_hat[o] * r[o] = (q[o] - z[o]) * (s[o] r[o])``);
    only applied to quantized modules (see :func:`_row_fold`)."""
    params = [quant_params_of(m) for m in mods]
    for i, r in (row_scale or {}).items():
        if params[i] is not None:
            params[i] = {**params[i], "scales": params[i]["scales"].float() * r.float().to(
                params[i]["scales"].device)[:, None]}
    if all(p is None for p in params):
        labels[key] = "dense"
        w = mods[0].weight if len(mods) == 1 else torch.cat([m.weight for m in mods], 0)
        return Dense(w.to(device, dtype)), None  # one module: no copy (a tied lm_head stays shared)
    reason = "some of the fused Linears are not quantized" if any(p is None for p in params) else None
    if reason is None:
        try:
            fused = fuse_params(params)
        except ValueError as e:
            reason = str(e)
    if reason is None:
        lin, labels[key] = quant_matmul(fused, dtype, device, backend, cache, config)
        s = fused["input_scale"]
        return lin, None if s is None else s.to(device, torch.float32)
    warnings.warn(f"{key}: {reason}; it runs dense (dequantized weights)", stacklevel=3)
    labels[key] = f"dense ({reason})"
    dense = [_dense(m) for m in mods]
    for i, r in (row_scale or {}).items():
        dense[i] = dense[i] * r.to(dense[i].device)[:, None]
    return Dense(torch.cat(dense, 0).to(device, dtype)), None


def _fold(ln: torch.Tensor, s, dtype) -> torch.Tensor:
    """RMSNorm weight with AWQ's ``1 / s`` folded in (``None``: unchanged)."""
    return ln.to(dtype) if s is None else (ln.float() / s.to(ln.device)).to(dtype)


def _scaled(lin, s, dtype):
    return lin if s is None else InputScaled(lin, s.to(dtype))


def _row_fold(prev, nxt) -> torch.Tensor | None:
    """``1 / s`` ``[in]`` float32 of ``nxt``'s AWQ input scale ``s`` where it can go into the output rows of the
    quantized ``prev`` (whose output reaches ``nxt`` only through ops linear per channel: ``up`` -> ``down``,
    ``silu(gate) * up``; ``v`` -> ``o`` when every attention head has its own value head: the attention output of
    channel ``c`` is a weighted sum of channel ``c`` of v, while under GQA one v channel feeds several o channels,
    whose scales differ, and the widths differ), else None."""
    q = quant_params_of(nxt)
    if q is None or q["input_scale"] is None or not callable(getattr(prev, "quant_params", None)):
        return None
    return 1.0 / q["input_scale"].float() if q["q"].shape[1] == prev.out_features else None


def _quantized_layer(blk, pre: str, dtype, device, backend: str, labels: dict, cache: bool,
                     config=None) -> LayerWeights:
    """One decoder block whose Linears may be quantized (``quant_params``), on the runtime matmuls.

    AWQ's input scales leave no runtime op where an exact fold exists (AutoAWQ's ``apply_scale`` folds them the
    same way, into the previous op, before quantizing): q/k/v's and gate/up's ``1 / s`` into the RMSNorm weight
    in front (:func:`_fold`), down's into the rows of up (the group scales of up's output rows ``o`` times
    ``1 / s_down[o]``: ``down((silu(g) * up) / s) = down(silu(g) * (up / s))``), o's into the rows of v when
    there are as many key/value heads as heads; what is left (o under GQA) divides the activation
    (:class:`InputScaled`). The folds are exact in real arithmetic; in bf16 the folded scales round once more. With
    o's scale in v, the KV cache holds ``v / s_o`` (as an AutoAWQ checkpoint of such a model does), so a quantized
    KV cache (FP8, INT8) rounds the rescaled values."""
    a, m = blk.self_attn, blk.mlp
    key = pre.replace("model.", "")
    r_o, r_d = _row_fold(a.v_proj, a.o_proj), _row_fold(m.up_proj, m.down_proj)
    wqkv, s_qkv = _runtime([a.q_proj, a.k_proj, a.v_proj], dtype, device, backend, key + "qkv", labels, cache,
                           None if r_o is None else {2: r_o}, config)
    wo, s_o = _runtime([a.o_proj], dtype, device, backend, key + "o", labels, cache, config=config)
    wgu, s_gu = _runtime([m.gate_proj, m.up_proj], dtype, device, backend, key + "gate_up", labels, cache,
                         None if r_d is None else {1: r_d}, config)
    wd, s_d = _runtime([m.down_proj], dtype, device, backend, key + "down", labels, cache, config=config)
    s_o = None if r_o is not None else s_o
    s_d = None if r_d is not None else s_d
    biases = [a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]
    if r_o is not None and biases[2] is not None:  # v's bias scales with its rows: (x W_v^T + b_v) / s_o
        biases[2] = biases[2].float() * r_o.to(biases[2].device)
    return LayerWeights(
        ln1=_fold(blk.input_layernorm.weight.to(device), s_qkv, dtype), wqkv=wqkv,
        bqkv=torch.cat(biases).to(device, dtype) if biases[0] is not None else None,
        wo=_scaled(wo, s_o, dtype), bo=None if a.o_proj.bias is None else a.o_proj.bias.to(device, dtype),
        ln2=_fold(blk.post_attention_layernorm.weight.to(device), s_gu, dtype), wgu=wgu,
        wd=_scaled(wd, s_d, dtype))


def weights_from_hf(model, dtype, device, w4a16=None, backend="dequant", group_size=128,
                    quantize_lm_head=False, quant_runtime: str = "auto", config=None) -> ModelWeights:
    """Copy (and fuse) the weights of an HF ``LlamaForCausalLM``/``Qwen2ForCausalLM``.

    Quantized Linears (``workbench.quant.QuantLinear``) run on the quantized matmuls built from their
    codes (``backend`` is the INT4 backend). ``quant_runtime``: ``"kernels"`` computes from the codes
    on every call; ``"cached"`` keeps the weight of a matmul that would dequantize on every call
    (INT4 ``"dequant"``, INT8) dequantized once (:class:`workbench.engine.runtime.Dequantized`);
    ``"auto"`` is ``"kernels"`` on CUDA and ``"cached"`` on the CPU, where no quantized matmul beats a
    dense one; ``"dense"`` uses the dequantized weights as float weights (no quantized format at
    all). ``config``: the ``EngineConfig`` routing follows (default ``EngineConfig()``).
    ``w4a16`` (float models): None (dense),
    ``"rtn"`` (RTN-quantize every block Linear here, groups of ``group_size``), or a dict mapping HF
    module names (``"model.layers.0.self_attn.q_proj"``) to ``(qweight, scales, zeros)`` or to
    ``{"qweight", "scales", "zeros"}``; qweight ``[out, in]`` 0..15 or packed ``[out, in // 2]``.
    Raises ValueError for an unknown ``quant_runtime``.
    """
    if quant_runtime not in QUANT_RUNTIMES:
        raise ValueError(f"quant_runtime={quant_runtime!r} is unknown; use one of {QUANT_RUNTIMES}")
    base = model.model
    quantized = quant_runtime != "dense" and w4a16 is None and any(
        callable(getattr(mod, "quant_params", None)) for mod in model.modules())
    cache = quant_runtime == "cached" or (quant_runtime == "auto" and torch.device(device).type != "cuda")
    layers, labels = [], {}
    for i, blk in enumerate(base.layers):
        pre = f"model.layers.{i}."
        if quantized:
            layers.append(_quantized_layer(blk, pre, dtype, device, backend, labels, cache, config))
            continue
        a, m = blk.self_attn, blk.mlp
        wqkv = torch.cat([_dense(a.q_proj), _dense(a.k_proj), _dense(a.v_proj)], 0).to(device, dtype)
        qn = [pre + f"self_attn.{p}_proj" for p in "qkv"]
        biases = [a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]
        bqkv = torch.cat(biases).to(device, dtype) if biases[0] is not None else None
        wgu = torch.cat([_dense(m.gate_proj), _dense(m.up_proj)], 0).to(device, dtype)
        wo = _dense(a.o_proj).to(device, dtype)
        wd = _dense(m.down_proj).to(device, dtype)
        layers.append(LayerWeights(
            ln1=blk.input_layernorm.weight.to(device, dtype),
            wqkv=make_linear(wqkv, _fused_quant(w4a16, qn, wqkv.shape[1]), dtype, backend, group_size, config),
            bqkv=bqkv,
            wo=make_linear(wo, _fused_quant(w4a16, [pre + "self_attn.o_proj"], wo.shape[1]), dtype, backend, group_size,
                           config),
            bo=None if a.o_proj.bias is None else a.o_proj.bias.to(device, dtype),
            ln2=blk.post_attention_layernorm.weight.to(device, dtype),
            wgu=make_linear(wgu, _fused_quant(w4a16, [pre + "mlp.gate_proj", pre + "mlp.up_proj"], wgu.shape[1]),
                            dtype, backend, group_size, config),
            wd=make_linear(wd, _fused_quant(w4a16, [pre + "mlp.down_proj"], wd.shape[1]), dtype, backend, group_size,
                           config),
        ))
    embed = base.embed_tokens.weight.to(device, dtype)
    if quantized:
        lm, s = _runtime([model.lm_head], dtype, device, backend, "lm_head", labels, cache, config=config)
        lm = _scaled(lm, s, dtype)
    else:
        lm_w = _dense(model.lm_head).to(device, dtype)
        lm_q = None
        if quantize_lm_head and w4a16 is not None:
            lm_q = "rtn" if w4a16 == "rtn" else _fused_quant(w4a16, ["lm_head"], lm_w.shape[1])
        lm = make_linear(lm_w, lm_q, dtype, backend, group_size, config)
    return ModelWeights(embed=embed, layers=layers, norm=base.norm.weight.to(device, dtype), lm_head=lm,
                        labels=labels)


def random_weights(spec, dtype, device, qkv_bias=False, w4a16=False, backend="dequant", group_size=128,
                   quantize_lm_head=False, seed=0, std=0.02, config=None) -> ModelWeights:
    """Random N(0, std) weights (HF's ``initializer_range``) created directly on ``device`` in
    ``dtype``, layer by layer (a 7B model takes seconds on a GPU). Norm weights are 1 + N(0, 0.05)
    and biases N(0, std) so every term is exercised. With ``w4a16`` each block matmul is RTN-quantized
    as soon as it is drawn, so peak memory stays near the quantized size."""
    g = torch.Generator(device=device).manual_seed(seed)
    h, d, inter = spec.hidden, spec.head_dim, spec.intermediate

    def rnd(*shape, scale=std):
        return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).mul_(scale).to(dtype)

    def norm_w():
        return (1 + rnd(h, scale=0.05).float()).to(dtype)

    def lin(out_f, in_f):
        return make_linear(rnd(out_f, in_f), "rtn" if w4a16 else None, dtype, backend, group_size, config)

    layers = []
    nq = (spec.n_heads + 2 * spec.n_kv_heads) * d
    for _ in range(spec.n_layers):
        layers.append(LayerWeights(ln1=norm_w(), wqkv=lin(nq, h), bqkv=rnd(nq) if qkv_bias else None,
                                   wo=lin(h, spec.n_heads * d), bo=None, ln2=norm_w(),
                                   wgu=lin(2 * inter, h), wd=lin(h, inter)))
    embed = rnd(spec.vocab, h)
    lm_w = embed if spec.tie_embeddings else rnd(spec.vocab, h)
    lm = make_linear(lm_w, "rtn" if (w4a16 and quantize_lm_head) else None, dtype, backend, group_size, config)
    return ModelWeights(embed=embed, layers=layers, norm=norm_w(), lm_head=lm)
