"""The fast path: own Llama/Qwen2/SmolLM forward over a static KV cache, CUDA graphs for small steps.

Terms (see :mod:`workbench.engine.api`): a *slot* is one row of the KV cache; ``extend_batch``
appends right-padded tokens ``[B, T]`` to slots ``[B]``, each at its own position. Steps with
``T <= graph_max_t`` (decode ``T == 1``, verify ``T == k + 1``) replay a CUDA graph captured on first
use for that ``(B, T)``; longer steps (prefill) run eagerly. On CPU the same code runs without graphs.

KV cache: keys and values ``[layers, max_batch, kv_heads, S_cache, head_dim]`` with
``S_cache = round_up(max_seq + 1, 16)``; position ``max_seq`` is a scratch row that padded tokens
write to and no valid query attends to. Attention is ``F.scaled_dot_product_attention`` with an
explicit additive mask (key ``s`` visible to the query at position ``p`` iff ``s <= p``) over the
whole cache row in graph steps and over the columns in use in eager steps, with the query heads
grouped per KV head so K/V are never repeated (grouped-query attention, Ainslie et al. 2023).
On CUDA, steps with ``T <= graph_max_t`` instead use the split-KV decode-attention kernel of
:mod:`workbench.kernels.attention` (``Engine.decode_attention``), which reads each query's position
from a device tensor and touches only the columns below it: one graph serves every context length and
the step's attention cost follows the real context, not ``max_seq``.

``kv_dtype`` other than the compute dtype (FP8, INT8 with per-head scales, another float type; see
:mod:`workbench.engine.kv_cache`) stores keys and values in a :class:`~workbench.engine.kv_cache.QuantizedKVCache`
instead: RoPE and attention then take the torch path (SDPA over dequantized keys and values, in graph
steps too); the fused matmuls of :mod:`workbench.engine.dispatch` (which write the cache inside
the qkv projection) and the decode-attention kernel serve only the compute-dtype cache.

Beyond the protocol, ``extend_batch(..., logits="last")`` returns only each row's last valid logits
``[B, vocab]`` (prefill and MMLU scoring), and :meth:`Engine.weight_bytes` /
:meth:`Engine.kv_bytes_per_token` give the bytes a decode step must read (bandwidth floors).
"""

from __future__ import annotations

import hashlib
import json

import pandas as pd
import torch

from workbench.arch import ModelSpec, kv_bytes_per_token
from workbench.engine import dispatch
from workbench.engine.config import EngineConfig
from workbench.engine.forward import forward
from workbench.engine.kv_cache import make_kv_cache, resolve_kv_dtype
from workbench.engine.ops import get_ops
from workbench.engine.rope import rope_tables, round_up
from workbench.engine.weights import ModelWeights, random_weights, weights_from_hf


class _launch:
    """``with _launch(pdl, max_mt):`` sets :data:`workbench.kernels.common.PDL_ENABLED` to ``pdl`` (the engine's
    ``EngineConfig.pdl``) and :data:`workbench.kernels.w4a16_mma.PDL_MAX_MT` to ``max_mt`` (None: leaves it) for the
    block (a step, or a graph capture, whose launches keep the setting) and restores both after, whatever happens
    inside. A CPU engine's steps never touch the kernel modules (``pdl`` None there)."""

    def __init__(self, pdl: bool | None, max_mt: int | None = None):
        self.pdl, self.value = pdl, max_mt

    def __enter__(self):
        self.saved = []
        if self.pdl is None and self.value is None:  # a CPU step: the kernel modules are not even imported
            return
        from workbench.kernels import common, w4a16_mma  # both imported before either is changed

        for m, name, v in ((common, "PDL_ENABLED", self.pdl), (w4a16_mma, "PDL_MAX_MT", self.value)):
            if v is not None:
                self.saved.append((m, name, getattr(m, name)))
                setattr(m, name, v)

    def __exit__(self, *exc):
        for m, name, old in reversed(self.saved):
            setattr(m, name, old)


def launch_pdl(config: EngineConfig, device: torch.device) -> bool | None:
    """The launch switch an engine on ``device`` sets around its kernel calls: ``config.pdl`` on CUDA; None on other
    devices (their steps run no package kernel, so the kernel modules are left alone)."""
    return config.pdl if torch.device(device).type == "cuda" else None


def default_w4a16_backend(device: torch.device) -> str:
    """``"triton:dequant"`` on CUDA (few-row steps on the package's kernels, prefill dequantized then cuBLAS; see
    :mod:`workbench.engine.int4`), ``"tinygemm"`` if triton does not import, ``"dequant"`` on the CPU (where
    :mod:`workbench.engine.runtime` routes quantized models to torch's CPU INT kernels)."""
    if device.type != "cuda":
        return "dequant"
    try:
        import triton  # noqa: F401
    except ImportError:
        return "tinygemm"
    return "triton:dequant"


def _decode_attention_kernel(device: torch.device, head_dim: int):
    """:func:`workbench.kernels.attention.decode_attention` on CUDA for a power-of-two ``head_dim``
    >= 16 if triton imports, else None (SDPA with a mask)."""
    if device.type != "cuda" or head_dim & (head_dim - 1) or head_dim < 16:
        return None
    try:
        from workbench.kernels.attention import decode_attention
    except ImportError:
        return None
    return decode_attention


def _leaves(matmuls) -> list:
    """The matmul objects behind wrappers (AWQ input scale, padding, CPU copies), wrappers included."""
    out = []
    for m in matmuls:
        while m is not None:
            out.append(m)
            m = getattr(m, "inner", None)
    return out


def _default_device(device):
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Engine:
    """:class:`~workbench.engine.api.BatchRunner` with slots; ``runner(slot)`` gives a
    :class:`~workbench.engine.api.Runner` view of one slot.

    Build with :meth:`from_hf` (weights of any Llama/Qwen2/SmolLM HF model) or :meth:`from_config`
    (random init on the device). ``w4a16`` selects group-wise INT4 weights (see
    :mod:`workbench.engine.int4`) computed with ``w4a16_backend``. ``kv_dtype``: KV-cache storage
    (``"auto"`` = the compute dtype; ``"fp8_e4m3"``, ``"int8"``, ``"bfloat16"``... see
    :mod:`workbench.engine.kv_cache`).
    """

    def __init__(self, spec: ModelSpec, weights: ModelWeights, hf_config, max_batch: int, max_seq: int,
                 dtype: torch.dtype, device: torch.device, use_graphs: bool | None = None,
                 graph_max_t: int = 16, kv_dtype: str = "auto", config: EngineConfig | None = None):
        if max_batch < 1 or max_seq < 1:
            raise ValueError(f"max_batch={max_batch} and max_seq={max_seq} must be >= 1")
        self.spec, self.w, self.dtype, self.device = spec, weights, dtype, device
        self.engine_config = config or EngineConfig()  # the kernels routing may choose (route_table says which)
        self._pdl = launch_pdl(self.engine_config, device)  # set around each step, capture and tuning (_launch)
        self.tuning: dict = {}  # route measurements of this engine's matmuls (dense-mma / w4a16-mma vs the others)
        for m in _leaves(weights.matmuls()):
            if hasattr(m, "tuning"):
                m.tuning, m.engine_config = self.tuning, self.engine_config
        with _launch(self._pdl):  # tunings are timed as the steps will launch (EngineConfig.pdl)
            for m in weights.matmuls():  # tune the plain INT4 GEMVs now, not inside the first (timed) step (the
                # fused one-row variants: when the fused path is turned on, workbench.engine.dispatch.build)
                if hasattr(m, "warmup"):
                    m.warmup(max_batch)
        self.config = hf_config  # the HF config (RoPE parameters); engines may share weights
        self.vocab_size = spec.vocab
        self.max_batch, self.max_seq = max_batch, max_seq
        self.scratch = max_seq
        self.s_cache = round_up(max_seq + 1, 16)
        self.ops = get_ops(device)
        if self.ops.name == "triton" and (spec.head_dim & (spec.head_dim - 1)):
            self.ops = get_ops(torch.device("cpu"))  # the fused RoPE kernel needs a power-of-two head_dim
        shape = (spec.n_layers, max_batch, spec.n_kv_heads, self.s_cache, spec.head_dim)
        # KV cache: the compute dtype in k_cache/v_cache, or another format in self.kvq (kv_cache.py)
        self.kv_dtype = resolve_kv_dtype(kv_dtype, dtype)
        self.kvq = make_kv_cache(self.kv_dtype, *shape[:-1], spec.head_dim, dtype, device)
        if self.kvq is None:
            self.k_cache = torch.zeros(shape, dtype=dtype, device=device)
            self.v_cache = torch.zeros(shape, dtype=dtype, device=device)
        else:
            self.k_cache, self.v_cache = self.kvq.k, self.kvq.v
        self.cos, self.sin = rope_tables(hf_config, spec.head_dim, self.s_cache, device)
        self._key_pos = torch.arange(self.s_cache, device=device)
        self._len_dev = torch.zeros(max_batch, dtype=torch.int64, device=device)
        self._len_host = torch.zeros(max_batch, dtype=torch.int64)
        self.use_graphs = device.type == "cuda" if use_graphs is None else bool(use_graphs)
        if self.use_graphs and device.type != "cuda":
            raise ValueError("use_graphs=True needs a CUDA device")
        self.graph_max_t = graph_max_t
        self._graphs: dict = {}
        self.pdl_choice: dict = {}  # (B, T, prefix, last) -> PDL_MAX_MT its graph was captured with (_pdl_max_mt)
        self._pool = None
        self._dev_cache: dict = {}
        # attention of small steps (T <= graph_max_t): Triton decode kernel on CUDA, else None = SDPA;
        # set before graphs are captured (a captured graph keeps the choice)
        self.decode_attention = _decode_attention_kernel(device, spec.head_dim) if self.kvq is None else None
        # steps of few rows: matmuls with the small operations fused in (None = the unfused path)
        self.fused: dispatch.FusedMatmuls | None = None
        with _launch(self._pdl):
            self.set_fused_gemv(device.type == "cuda" and self.engine_config.enabled("triton-gemv"))

    @property
    def gemv1(self):
        """The fused calls in use (:class:`~workbench.engine.dispatch.FusedMatmuls`), or None."""
        return self.fused

    def set_fused_gemv(self, on: bool, max_rows: int | None = None, min_rows: int | None = None) -> bool:
        """Run steps of ``min_rows`` to ``max_rows`` token rows (default :func:`~workbench.engine.dispatch.
        default_rows`: bf16 1..1, W4A16 2..64, or 1..64 for a model whose INT4 weights have only the one-row fused
        kernel) through
        the fused kernels of :mod:`workbench.engine.dispatch` (RMSNorm, SwiGLU, residual adds and, for one row,
        RoPE + KV write inside the matmuls) if ``on`` and the model allows it. Returns whether they are now in
        use. Tunes the one-row GEMVs (bf16, and the fused INT4 variants) for this model's shapes on CUDA (outside
        graph capture) and drops
        captured graphs, which keep the old choice. On CPU they run only under ``TRITON_INTERPRET=1`` (tests)."""
        self._graphs.clear()
        self.pdl_choice.clear()
        # and their memory pool: capturing into the old pool after a switch tripped torch 2.11's caching allocator
        # on the H200 ("it->second->use_count > 0" at capture_begin; benchmarks/results/h200_2026-12-01b/w4_onerow)
        self._pool = None
        # (the fused qkv matmuls write a compute-dtype KV cache: none with another KV-cache format)
        self.fused = dispatch.build(self, max_rows, min_rows=min_rows) if on and self.kvq is None else None
        return self.fused is not None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_hf(cls, model, max_batch: int = 1, max_seq: int | None = None, dtype=None, device=None,
                w4a16=None, w4a16_backend: str | None = None, group_size: int = 128,
                quantize_lm_head: bool = False, use_graphs: bool | None = None,
                quant_runtime: str = "auto", kv_dtype: str = "auto", config: EngineConfig | None = None) -> Engine:
        """Engine with the weights of ``model`` (an HF ``*ForCausalLM`` of type llama/qwen2/mistral).

        ``dtype``/``device`` default to the model's. A model quantized by ``workbench.quant``
        (``QuantLinear`` layers: RTN, AWQ, GPTQ) runs on the quantized matmuls built from its codes,
        INT4 through ``w4a16_backend`` (``quant_runtime``: ``"auto"`` = ``"kernels"`` on CUDA,
        ``"cached"`` on the CPU; ``"dense"``: dequantized float weights; see
        :func:`workbench.engine.weights.weights_from_hf`); ``self.w.labels`` says which matmul each
        weight got (:mod:`workbench.engine.runtime`). For float models, ``w4a16``: None, ``"rtn"`` (RTN INT4 with
        ``group_size``) or a dict ``{hf_module_name: (qweight, scales, zeros)}``. ``max_seq`` defaults
        to ``min(max_position_embeddings, 2048)``. ``kv_dtype``: KV-cache storage (see
        :mod:`workbench.engine.kv_cache`). ``config``: an :class:`~workbench.engine.config.EngineConfig`
        (default ``EngineConfig.from_env()``; its ``compute_dtype`` is the default ``dtype``). Raises ValueError
        for unsupported architectures.
        """
        spec = ModelSpec.from_hf_config(model.config, strict=True)
        config = config or EngineConfig.from_env()
        p = next(model.parameters())
        dtype = dtype or config.dtype(p.dtype)
        device = torch.device(device) if device is not None else p.device
        backend = w4a16_backend or default_w4a16_backend(device)
        if max_seq is None:
            max_seq = min(int(getattr(model.config, "max_position_embeddings", 2048)), 2048)
        with torch.no_grad():
            w = weights_from_hf(model, dtype, device, w4a16, backend, group_size, quantize_lm_head, quant_runtime,
                                config)
        return cls(spec, w, model.config, max_batch, max_seq, dtype, device, use_graphs, kv_dtype=kv_dtype,
                   config=config)

    @classmethod
    def from_config(cls, hf_config, max_batch: int = 1, max_seq: int = 2048, dtype=None, device=None,
                    w4a16: bool = False, w4a16_backend: str | None = None, group_size: int = 128,
                    quantize_lm_head: bool = False, use_graphs: bool | None = None, seed: int = 0,
                    kv_dtype: str = "auto", config: EngineConfig | None = None) -> Engine:
        """Random-init engine for an HF config (object, or dict with ``model_type``), built directly
        on ``device`` (default CUDA if available) in ``dtype`` (default ``config.compute_dtype``, else bf16 on
        CUDA, float32 on CPU); ``kv_dtype``, ``config`` as in :meth:`from_hf`."""
        if isinstance(hf_config, dict):
            from transformers import AutoConfig

            d = dict(hf_config)
            hf_config = AutoConfig.for_model(d.pop("model_type"), **d)
        spec = ModelSpec.from_hf_config(hf_config, strict=True)
        device = _default_device(device)
        config = config or EngineConfig.from_env()
        dtype = dtype or config.dtype(torch.bfloat16 if device.type == "cuda" else torch.float32)
        backend = w4a16_backend or default_w4a16_backend(device)
        with torch.no_grad():
            w = random_weights(spec, dtype, device, spec.qkv_bias, w4a16, backend, group_size, quantize_lm_head, seed,
                               std=float(getattr(hf_config, "initializer_range", 0.02)), config=config)
        return cls(spec, w, hf_config, max_batch, max_seq, dtype, device, use_graphs, kv_dtype=kv_dtype,
                   config=config)

    # ------------------------------------------------------------------ protocol
    def lengths(self) -> torch.Tensor:
        """Cached tokens per slot, ``[max_batch]`` int64 on the CPU."""
        return self._len_host.clone()

    def runner(self, slot: int = 0) -> SlotRunner:
        """Single-sequence :class:`~workbench.engine.api.Runner` view of ``slot``."""
        if not 0 <= slot < self.max_batch:
            raise ValueError(f"slot={slot} outside [0, {self.max_batch})")
        return SlotRunner(self, slot)

    def reset(self) -> None:
        """Empty every slot."""
        self._len_host.zero_()
        self._len_dev.zero_()

    def truncate_slot(self, slot: int, length: int) -> None:
        """Drop slot ``slot``'s cached positions ``>= length`` (raises ValueError if length is
        negative or beyond the slot's length)."""
        cur = int(self._len_host[slot])
        if not 0 <= length <= cur:
            raise ValueError(f"truncate length {length} outside [0, {cur}] for slot {slot}")
        if length != cur:
            self._len_host[slot] = length
            # fill_ of a one-element view: a kernel launch. `_len_dev[slot] = length` copies the scalar from
            # pageable host memory, which waits for the queue: a host sync after every speculative verify step
            self._len_dev[slot:slot + 1].fill_(length)

    def copy_prefix(self, src: int, dst, length: int) -> None:
        """Copy the first ``length`` cached positions of ``src`` into each slot of ``dst``."""
        dst = torch.as_tensor(dst, dtype=torch.int64).view(-1)
        if length > int(self._len_host[src]):
            raise ValueError(f"length {length} > cached length {int(self._len_host[src])} of slot {src}")
        if len(dst) == 0:
            return
        idx = self._to_dev(dst)
        for cache in (self.k_cache, self.v_cache) if self.kvq is None else self.kvq.tensors():
            cache[:, idx, :, :length] = cache[:, src: src + 1, :, :length]
        self._len_host[dst] = length
        self._len_dev.index_fill_(0, idx, length)  # not `[idx] = length`: index_put copies the scalar and syncs

    def read_slot_kv(self, slot: int, length: int) -> torch.Tensor:
        """A copy of slot ``slot``'s first ``length`` cached positions, every layer, keys then values:
        ``[2, n_layers, n_kv_heads, length, head_dim]`` in the cache dtype, contiguous, on the engine's
        device (``k_cache[:, slot, :, :length]`` stacked on ``v_cache[...]``); the payload a disaggregated
        prefill instance sends. Raises ValueError if ``length`` exceeds the slot's cached length. With another
        KV-cache format (``kv_dtype``) the payload is dequantized to the compute dtype."""
        if not 0 <= slot < self.max_batch:
            raise ValueError(f"slot={slot} outside [0, {self.max_batch})")
        if not 0 <= length <= int(self._len_host[slot]):
            raise ValueError(f"length {length} outside [0, {int(self._len_host[slot])}] cached in slot {slot}")
        if self.kvq is not None:
            return torch.stack(self.kvq.read_slot(slot, length))
        return torch.stack((self.k_cache[:, slot, :, :length], self.v_cache[:, slot, :, :length]))

    def write_slot_kv(self, slot: int, kv: torch.Tensor) -> None:
        """Write ``kv`` ``[2, n_layers, n_kv_heads, L, head_dim]`` (the layout of :meth:`read_slot_kv`)
        into slot ``slot``'s positions ``0..L-1``; the slot's length becomes ``L`` (a disaggregated decode
        instance admitting a transferred prompt; roll it back with :meth:`truncate_slot`). Converts to
        the cache's device and dtype. Raises ValueError on a bad slot, shape or ``L > max_seq``."""
        if not 0 <= slot < self.max_batch:
            raise ValueError(f"slot={slot} outside [0, {self.max_batch})")
        s = self.spec
        if kv.dim() != 5 or (kv.shape[0], kv.shape[1], kv.shape[2], kv.shape[4]) != (2, s.n_layers, s.n_kv_heads,
                                                                                     s.head_dim):
            raise ValueError(f"kv has shape {tuple(kv.shape)}; expected [2, {s.n_layers}, {s.n_kv_heads}, L, "
                             f"{s.head_dim}] (Engine.read_slot_kv of the same model)")
        length = kv.shape[3]
        if length > self.max_seq:
            raise ValueError(f"kv holds {length} positions > max_seq={self.max_seq}; build a larger engine")
        if self.kvq is not None:  # quantized on the way in (kv_cache.py)
            self.kvq.write_slot(slot, kv[0], kv[1])
        else:
            self.k_cache[:, slot, :, :length] = kv[0]
            self.v_cache[:, slot, :, :length] = kv[1]
        self._len_host[slot] = length
        self._len_dev[slot:slot + 1].fill_(length)  # (no host sync: see truncate_slot)

    def synchronize(self) -> None:
        """Wait for queued device work."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @torch.inference_mode()
    def extend_batch(self, slots, tokens: torch.Tensor, n_valid=None, logits: str = "all") -> torch.Tensor:
        """Append right-padded ``tokens`` ``[B, T]`` (int64) to ``slots`` ``[B]``; ``n_valid`` ``[B]``
        real tokens per row (default T; 0 leaves a slot unchanged). Returns float32 logits
        ``[B, T, vocab]`` (padded positions undefined), or ``[B, vocab]`` at each row's last valid
        token with ``logits="last"``. Raises ValueError on bad slots or cache overflow."""
        slots_c = torch.as_tensor(slots, dtype=torch.int64).view(-1).cpu()
        tokens = torch.as_tensor(tokens)
        if tokens.dim() == 1:
            tokens = tokens.view(1, -1)
        b, t = tokens.shape
        nv_c = (torch.full((b,), t, dtype=torch.int64) if n_valid is None
                else torch.as_tensor(n_valid, dtype=torch.int64).view(-1).cpu())
        self._check(slots_c, b, t, nv_c)
        if logits not in ("all", "last"):
            raise ValueError(f"logits={logits!r}; use 'all' or 'last'")
        prefix = bool(torch.equal(slots_c, torch.arange(b)))
        last = logits == "last"
        slots_d = self._to_dev(slots_c)
        nv_d = self._to_dev(nv_c)
        tok_d = tokens.to(self.device, torch.int64)
        if self.use_graphs and t <= self.graph_max_t:
            out = self._replay((b, t, prefix, last), slots_d, tok_d, nv_d)
        else:  # eager: attend only to the cache columns in use (rounded up to 16)
            kv_len = min(round_up(int((self._len_host[slots_c] + nv_c).max()), 16), self.s_cache)
            out = self._forward(slots_d, tok_d, nv_d, prefix, last, kv_len)
        self._len_host[slots_c] += nv_c
        return out

    # ------------------------------------------------------------------ internals
    def _check(self, slots_c, b, t, nv_c):
        if len(slots_c) != b or b > self.max_batch or b == 0:
            raise ValueError(f"slots has {len(slots_c)} entries for {b} token rows (max_batch={self.max_batch})")
        if slots_c.min() < 0 or slots_c.max() >= self.max_batch or len(set(slots_c.tolist())) != b:
            raise ValueError(f"slots {slots_c.tolist()} must be distinct and in [0, {self.max_batch})")
        if len(nv_c) != b or nv_c.min() < 0 or nv_c.max() > t:
            raise ValueError(f"n_valid {nv_c.tolist()} must have {b} entries in [0, {t}]")
        over = self._len_host[slots_c] + nv_c
        if over.max() > self.max_seq:
            raise ValueError(f"KV cache overflow: a slot would hold {int(over.max())} > max_seq={self.max_seq} "
                             "tokens; build the engine with a larger max_seq or truncate first")

    def _to_dev(self, x: torch.Tensor) -> torch.Tensor:
        """Device copy of a small CPU index tensor, memoised so decode loops issue no host->device
        copy (a pageable copy would stall the queue)."""
        if self.device.type == "cpu":
            return x
        key = tuple(x.tolist())
        hit = self._dev_cache.get(key)
        if hit is None:
            if len(self._dev_cache) > 4096:
                self._dev_cache.clear()
            # pinned + non-blocking: a pageable copy waits for the whole queue (torch syncs the stream after it)
            hit = self._dev_cache[key] = x.pin_memory().to(self.device, non_blocking=True)
        return hit

    def _forward(self, slots, tokens, n_valid, prefix: bool, last: bool, kv_len: int | None = None) -> torch.Tensor:
        """One step (:func:`workbench.engine.forward.forward`), its kernels launched as ``EngineConfig.pdl`` says."""
        with _launch(self._pdl):
            return forward(self, slots, tokens, n_valid, prefix, last, kv_len)

    def _replay(self, key, slots_d, tok_d, nv_d) -> torch.Tensor:
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._capture(key, slots_d, tok_d)
        graph, st, out = entry
        st["slots"].copy_(slots_d)
        st["tokens"].copy_(tok_d)
        st["nv"].copy_(nv_d)
        graph.replay()
        return out.clone()

    def _capture(self, key, slots_d, tok_d):
        b, t, prefix, last = key
        st = {"slots": slots_d.clone(), "tokens": tok_d.clone(),
              "nv": torch.zeros(b, dtype=torch.int64, device=self.device)}  # n_valid 0: warm-up writes only scratch
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._forward(st["slots"], st["tokens"], st["nv"], prefix, last)
        torch.cuda.current_stream(self.device).wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        mt = self._pdl_max_mt(b * t)
        with _launch(self._pdl, mt):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                out = self._forward(st["slots"], st["tokens"], st["nv"], prefix, last)
        if mt is not None:
            self.pdl_choice[key] = mt
        self._graphs[key] = (graph, st, out)
        return self._graphs[key]

    def _pdl_max_mt(self, rows: int):
        """:data:`workbench.kernels.w4a16_mma.PDL_MAX_MT` for a graph of ``rows`` token rows: 1 (the multi-tile INT4
        MMA launches without programmatic dependent launch) above 32 rows where an INT4 matmul of this model runs
        them through the MMA kernel, else None (the module's own, 8). On the H200 (Qwen2-7B W4A16) batch 64 took
        6.05 ms with 1 and 6.63 with 8, batches 16 / 32 3.00 / 4.12 ms with 8 and 3.19 / 4.32 with 1
        (``benchmarks/results/h200_2026-12-04d/final_engine.json``, ``pdl_choice``)."""
        if rows <= 32:
            return None
        from workbench.engine.dispatch import _scaled_inner
        from workbench.engine.int4 import Int4Linear

        int4 = [m for m in map(_scaled_inner, self.w.matmuls()) if isinstance(m, Int4Linear)]
        return 1 if any(m._plain_mma(rows) for m in int4) else None

    def capture(self, batch_sizes=(1,), ts=(1,), prefix: bool = True, last: bool = False) -> None:
        """Capture graphs ahead of time (otherwise each ``(B, T)`` is captured on first use)."""
        if not self.use_graphs:
            return
        for b in batch_sizes:
            for t in ts:
                key = (b, t, prefix, last)
                if key not in self._graphs:
                    slots = self._to_dev(torch.arange(b))
                    self._capture(key, slots, torch.zeros(b, t, dtype=torch.int64, device=self.device))

    # ------------------------------------------------------------------ routing
    def route_table(self, rows=None) -> pd.DataFrame:
        """Which kernel runs each matmul, as a tidy frame: one row per matmul (``layers.0.qkv``, ..., ``lm_head``)
        and row count ``rows`` (default: 1, ``max_batch`` and a 512-token prefill), with
        columns ``matmul``, ``rows``, ``kernel`` (names of :mod:`workbench.engine.routing`), ``path`` (``fused``:
        the step runs the fused calls of :mod:`workbench.engine.dispatch`; ``plain``), ``config`` (the runtime
        label, e.g. ``"int4 cpu-int4pack g64 for <= 8 rows, dequantized copy for more"``) and ``why``. Kernels
        chosen by a timing on this machine (``dense-mma``, ``w4a16-mma`` above ``w4a16_mma_rows``) show the
        outcome once measured (at engine build for the engine's batch sizes)."""
        rows = sorted({1, self.max_batch, 512} if rows is None else {int(r) for r in rows})
        names = [f"layers.{i}.{n}" for i in range(len(self.w.layers)) for n in ("qkv", "o", "gate_up", "down")]
        out = []
        for name, m in zip(names + ["lm_head"], self.w.matmuls()):
            for r in rows:
                kernel, why, path = *m.route(r), "plain"
                fz = self.fused
                if fz is not None and fz.min_rows <= r <= fz.max_rows:
                    kernel, why, path = *dispatch.route(fz, m, r, (kernel, why)), "fused"
                out.append({"matmul": name, "rows": r, "kernel": kernel, "path": path,
                            "config": self.w.labels.get(name, "dense"), "why": why})
        return pd.DataFrame(out, columns=["matmul", "rows", "kernel", "path", "config", "why"])

    def route_key(self, rows=None) -> str:
        """A short stable string for results keys and provenance: ``"<kernels>@<digest>"``, the distinct kernels
        of :meth:`route_table` (sorted) and a 10-hex digest of the table's (matmul, rows, kernel, path, config)
        plus ``EngineConfig.to_dict()``, e.g. ``"cpu-int4pack+dequant+torch-linear@3f2a..."``."""
        t = self.route_table(rows)
        body = json.dumps({"routes": t[["matmul", "rows", "kernel", "path", "config"]].values.tolist(),
                           "config": self.engine_config.to_dict(), "dtype": str(self.dtype)}, default=str)
        return "+".join(sorted(set(t["kernel"]))) + "@" + hashlib.sha256(body.encode()).hexdigest()[:10]

    # ------------------------------------------------------------------ floors
    def weight_bytes(self) -> int:
        """Bytes of weights one decode step reads (see :meth:`ModelWeights.nbytes_per_step`)."""
        return self.w.nbytes_per_step()

    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes per cached token, all layers (scales of an INT8 cache included)."""
        if self.kvq is not None:
            return self.kvq.bytes_per_token
        s = self.spec
        return kv_bytes_per_token(s.n_layers, s.n_kv_heads, s.head_dim, self.dtype.itemsize)


class SlotRunner:
    """:class:`~workbench.engine.api.Runner` over one slot of an :class:`Engine`."""

    def __init__(self, engine: Engine, slot: int):
        self.engine, self.slot = engine, slot
        self.vocab_size = engine.vocab_size
        self.device = engine.device

    def reset(self) -> None:
        self.engine.truncate_slot(self.slot, 0)

    @property
    def length(self) -> int:
        return int(self.engine._len_host[self.slot])

    def extend(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append ``tokens`` ``[T]`` or ``[1, T]``; float32 logits ``[T, vocab]``."""
        tokens = torch.as_tensor(tokens).reshape(1, -1)
        return self.engine.extend_batch([self.slot], tokens)[0]

    def truncate(self, length: int) -> None:
        self.engine.truncate_slot(self.slot, length)

    def synchronize(self) -> None:
        self.engine.synchronize()
