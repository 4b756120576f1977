"""Log-likelihood of every MMLU choice: the HF reference and the engine fast path, side by side.

Both compute, for question i and choice c with context tokens ``x`` (shared prefix + own tokens) and
continuation tokens ``y_1..y_m``, ``ll[i, c] = sum_j log softmax(logits(x, y_<j))[y_j]`` in two steps:

1. the context: each subject's shared token prefix is computed once and its KV cache copied to a
   batch of that subject's questions, whose own tokens are appended right-padded (causal attention
   never lets a real token see the padding to its right); the last real position's logits give
   ``log p(y_1 | x)`` for every choice at once;
2. only for continuations of more than one token: ``y_1..y_{m-1}`` appended to the context's cache
   (one pass per choice; the cache is cut back to the context after each), whose logits give
   ``log p(y_j | x, y_<j)`` for ``j >= 2``.

This is lm-eval's sum over ``(ctx + cont)[:-1]``'s continuation positions, with the context computed
once instead of once per choice. Answer letters are one token, so the letter formulation is step 1.

* :func:`score_hf`: the Hugging Face forward with a ``DynamicCache`` (any model, any device): the
  reference, and the CPU default.
* :func:`score_engine`: :class:`workbench.engine.Engine` batch prefill (``extend_batch(...,
  logits="last")``, ``copy_prefix``): the subjects' prefixes resident in the top slots, questions of
  all subjects sorted by length and packed into steps of at most ``max_tokens`` padded tokens, results
  kept on the device (one copy to the host at the end). The CUDA default.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from workbench.arch import ModelSpec, kv_bytes_per_token

__all__ = ["score", "score_engine", "score_hf"]

HF_BATCH = 8  # questions per HF forward when batch_size is None
ENGINE_ROWS = 128  # questions per engine step when batch_size is None
_LOGITS_BYTES = 1 << 30  # cap on the [rows, T, vocab] float32 logits of one step-2 pass


def _pad(seqs: list, width: int | None = None) -> torch.Tensor:
    """Right-padded int64 ``[len(seqs), width]`` (pad id 0)."""
    width = width or max(len(s) for s in seqs)
    out = torch.zeros((len(seqs), width), dtype=torch.int64)
    for r, s in enumerate(seqs):
        out[r, :len(s)] = torch.as_tensor(s, dtype=torch.int64)
    return out


def _step2(req, idx) -> list[tuple[int, list, list]]:
    """Per choice c: (c, inputs y_1..y_{m-1}, targets y_2..y_m) of the questions ``idx``; only choices
    with some continuation longer than one token."""
    n_choices = len(req.cont_ids[idx[0]])
    out = []
    for c in range(n_choices):
        conts = [req.cont_ids[i][c] for i in idx]
        if max(len(k) for k in conts) > 1:
            out.append((c, [k[:-1] for k in conts], [k[1:] for k in conts]))
    return out


def _target_ll(logits: torch.Tensor, targets: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
    """``sum_j log_softmax(logits[r, j])[targets[r, j]]`` over ``j < n[r]``: logits ``[R, T, V]``,
    targets ``[R, T]`` int64, n ``[R]``; returns ``[R]`` float32."""
    lp = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    keep = torch.arange(targets.shape[1], device=targets.device).unsqueeze(0) < n.unsqueeze(1)
    return (lp * keep).sum(1)


# ---------------------------------------------------------------------------------------- HF reference
def _hf_forward(model, ids, pos, cache, mask=None, gather=None) -> torch.Tensor:
    """Logits ``[B, T, V]``, or ``[B, V]`` at positions ``gather`` ``[B]`` (the output head then runs
    on those rows only: same numbers, ``T`` times less head work)."""
    decoder, head = getattr(model, "model", None), model.get_output_embeddings()
    kw = {"input_ids": ids, "position_ids": pos, "past_key_values": cache, "use_cache": True, "attention_mask": mask}
    if decoder is None or head is None or getattr(model.config, "final_logit_softcapping", None):
        logits = model(**kw).logits
        return logits if gather is None else logits[torch.arange(ids.shape[0], device=ids.device), gather]
    hidden = decoder(**kw)[0]
    if gather is not None:
        hidden = hidden[torch.arange(ids.shape[0], device=ids.device), gather]
    return head(hidden)


def _hf_batch(model, req, idx, n_prefix: int, prefix_cache, ll: np.ndarray) -> None:
    from transformers import DynamicCache

    dev = next(model.parameters()).device
    ctx = [req.ctx_ids[i] for i in idx]
    lens = torch.tensor([len(c) for c in ctx], device=dev)
    width = int(lens.max())
    if prefix_cache is not None:
        cache = copy.deepcopy(prefix_cache)
        cache.batch_repeat_interleave(len(idx))
    else:
        cache = DynamicCache(config=model.config)
    pos = torch.arange(n_prefix, n_prefix + width, device=dev).expand(len(idx), -1)
    last = _hf_forward(model, _pad(ctx).to(dev), pos, cache, gather=lens - 1)  # [B, V]
    first = torch.tensor([[k[0] for k in req.cont_ids[i]] for i in idx], device=dev)
    ll[idx] = torch.log_softmax(last.float(), -1).gather(1, first).double().cpu().numpy()
    base = n_prefix + width  # cached columns after step 1: prefix, contexts, their padding
    for c, inputs, targets in _step2(req, idx):
        k = torch.tensor([len(x) for x in inputs], device=dev)
        t = int(k.max())
        mask = torch.ones((len(idx), base + t), dtype=torch.int64, device=dev)
        mask[:, :base][torch.arange(base, device=dev) >= n_prefix + lens.unsqueeze(1)] = 0  # context padding
        pos = n_prefix + lens.unsqueeze(1) + torch.arange(t, device=dev)
        logits = _hf_forward(model, _pad(inputs, t).to(dev), pos, cache, mask=mask)
        cache.crop(-t)  # back to the contexts (a negative count removes that many positions)
        ll[idx, c] += _target_ll(logits, _pad(targets, t).to(dev), k).double().cpu().numpy()


@torch.inference_mode()
def score_hf(model, req, batch_size: int = HF_BATCH, progress: bool = False) -> np.ndarray:
    """Reference scorer on the HF forward. Returns float64 ``[n, n_choices]`` log-likelihoods (nats)."""
    from tqdm.auto import tqdm

    dev = next(model.parameters()).device
    ll = np.zeros(req.choice_chars.shape)
    for s in tqdm(range(len(req.subjects)), desc="MMLU (hf)", disable=not progress):
        idx = np.flatnonzero(req.subject_idx == s)
        if not len(idx):
            continue
        prefix = req.prefix_ids[s]
        cache = None
        if prefix:
            from transformers import DynamicCache

            cache = DynamicCache(config=model.config)
            pos = torch.arange(len(prefix), device=dev).unsqueeze(0)
            _hf_forward(model, torch.tensor([prefix], device=dev), pos, cache, gather=pos[:, -1])
        idx = idx[np.argsort([len(req.ctx_ids[i]) for i in idx], kind="stable")]
        for b0 in range(0, len(idx), batch_size):
            _hf_batch(model, req, idx[b0:b0 + batch_size], len(prefix), cache, ll)
    return ll


# ---------------------------------------------------------------------------------------- engine path
def _to_device(x: torch.Tensor, dev: torch.device) -> torch.Tensor:
    """Host -> device without a stream sync (pinned, non-blocking) on CUDA."""
    return x.pin_memory().to(dev, non_blocking=True) if dev.type == "cuda" else x


def _groups(lengths: list[int], max_rows: int, max_tokens: int):
    """Consecutive ``[a, b)`` of ascending ``lengths`` with ``(b - a) <= max_rows`` and
    ``(b - a) * lengths[b - 1] <= max_tokens`` (at least one row each)."""
    a, n = 0, len(lengths)
    while a < n:
        b = a + 1
        while b < n and b - a < max_rows and (b + 1 - a) * lengths[b] <= max_tokens:
            b += 1
        yield a, b
        a = b


def _prefill(eng, slots: list[int], seqs: list[list[int]], max_tokens: int) -> None:
    """Append ``seqs`` to empty ``slots`` in ragged steps of at most ``max_tokens`` padded tokens."""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    for a, b in _groups([len(seqs[i]) for i in order], len(order), max_tokens):
        rows = order[a:b]
        width = max(16, max_tokens // len(rows))
        longest = max(len(seqs[i]) for i in rows)
        for t0 in range(0, longest, width):
            part = [seqs[i][t0:t0 + width] for i in rows]
            n_valid = torch.tensor([len(x) for x in part])
            eng.extend_batch([slots[i] for i in rows], _to_device(_pad([x or [0] for x in part]), eng.device),
                             n_valid, logits="last")


def _engine_step(eng, req, idx: np.ndarray, slot_of: dict, ll: torch.Tensor) -> None:
    """Score questions ``idx`` in slots ``0..len(idx)-1`` (step 1, then step 2 per choice)."""
    dev, m = eng.device, len(idx)
    subj = req.subject_idx[idx]
    for s in np.unique(subj):
        rows = np.flatnonzero(subj == s).tolist()
        if req.prefix_ids[s]:
            eng.copy_prefix(slot_of[int(s)], rows, len(req.prefix_ids[s]))
        else:
            for r in rows:
                eng.truncate_slot(r, 0)
    ctx = [req.ctx_ids[i] for i in idx]
    logits = eng.extend_batch(list(range(m)), _to_device(_pad(ctx), dev), torch.tensor([len(c) for c in ctx]),
                              logits="last")  # [m, V]
    first = _to_device(torch.tensor([[k[0] for k in req.cont_ids[i]] for i in idx]), dev)
    idx_d = _to_device(torch.as_tensor(idx, dtype=torch.int64), dev)
    ll[idx_d] = torch.log_softmax(logits, -1).gather(1, first)
    base = [len(req.prefix_ids[s]) + len(c) for s, c in zip(subj, ctx)]
    for c, inputs, targets in _step2(req, idx):
        width = max(len(x) for x in inputs)
        per = max(1, _LOGITS_BYTES // (width * eng.vocab_size * 4))
        for r0 in range(0, m, per):
            k = [len(x) for x in inputs[r0:r0 + per]]
            if max(k) == 0:
                continue
            rows = list(range(r0, r0 + len(k)))
            out = eng.extend_batch(rows, _to_device(_pad(inputs[r0:r0 + per], width), dev), torch.tensor(k),
                                   logits="all")  # [rows, width, V]
            tgt = _to_device(_pad(targets[r0:r0 + per], width), dev)
            ll[idx_d[r0:r0 + len(k)], c] += _target_ll(out, tgt, _to_device(torch.tensor(k), dev))
            for r, kr in zip(rows, k):
                if kr:
                    eng.truncate_slot(r, base[r])


def _waves(req, n_resident: int) -> list[list[int]]:
    present = sorted(set(req.subject_idx.tolist()))
    if not any(req.prefix_ids[s] for s in present):
        return [present]
    return [present[i:i + n_resident] for i in range(0, len(present), n_resident)]


@torch.inference_mode()
def score_engine(eng, req, batch_size: int = ENGINE_ROWS, max_tokens: int = 4096, progress: bool = False) -> np.ndarray:
    """Fast-path scorer on an :class:`workbench.engine.Engine` (CPU or CUDA). Each wave of subjects
    keeps its prefixes in the top ``n_resident`` slots; its questions, sorted by context length, are
    scored ``batch_size`` (or fewer, by ``max_tokens``) at a time in slots ``0..``. Returns float64
    ``[n, n_choices]`` log-likelihoods (nats), identical in exact arithmetic to :func:`score_hf`.

    Raises ValueError when the engine's ``max_seq`` is shorter than the longest request or it has
    fewer than two slots.
    """
    from tqdm.auto import tqdm

    longest = _longest(req)
    if longest > eng.max_seq or eng.max_batch < 2:
        raise ValueError(f"the engine holds max_seq={eng.max_seq} tokens in {eng.max_batch} slots; the requests "
                         f"need {longest} tokens and >= 2 slots: build it with Engine.from_hf(model, max_seq={longest}, "
                         "max_batch=...)")
    rows_cap = min(batch_size, eng.max_batch - 1)
    n_resident = eng.max_batch - rows_cap
    ll = torch.zeros(req.choice_chars.shape, dtype=torch.float32, device=eng.device)
    use_graphs, eng.use_graphs = eng.use_graphs, False  # ragged shapes: one graph per shape would not pay
    try:
        waves = _waves(req, n_resident)
        bar = tqdm(total=len(req), desc="MMLU (engine)", disable=not progress)
        for wave in waves:
            eng.reset()
            slot_of = {s: eng.max_batch - 1 - j for j, s in enumerate(wave)}
            with_prefix = [s for s in wave if req.prefix_ids[s]]
            _prefill(eng, [slot_of[s] for s in with_prefix], [req.prefix_ids[s] for s in with_prefix], max_tokens)
            idx = np.flatnonzero(np.isin(req.subject_idx, wave))
            idx = idx[np.argsort([len(req.ctx_ids[i]) for i in idx], kind="stable")]
            cap = rows_cap if with_prefix else eng.max_batch
            for a, b in _groups([len(req.ctx_ids[i]) for i in idx], cap, max_tokens):
                _engine_step(eng, req, idx[a:b], slot_of, ll)
                bar.update(b - a)
        bar.close()
    finally:
        eng.use_graphs = use_graphs
    return ll.double().cpu().numpy()


def _longest(req) -> int:
    """Most tokens a slot holds: prefix + context + the longest continuation minus its last token."""
    p = np.array([len(x) for x in req.prefix_ids])[req.subject_idx]
    tail = [len(c) + max(len(k) for k in ks) - 1 for c, ks in zip(req.ctx_ids, req.cont_ids)]
    return int(max(p + np.array(tail)))


def _engine_supports(model) -> bool:
    try:
        ModelSpec.from_hf_config(model.config, strict=True)
    except (ValueError, AttributeError):
        return False
    return hasattr(getattr(model, "model", None), "layers") and hasattr(model, "lm_head")


def build_engine(model, req, batch_size: int, kv_budget: int | None = None):
    """An eager :class:`workbench.engine.Engine` over ``model`` sized for ``req``: ``max_seq`` the
    longest request, ``batch_size`` question slots plus as many resident prefix slots (up to one per
    subject) as ``kv_budget`` bytes of KV cache allow (default: half the free device memory left
    after the engine's weight copy on CUDA, 2 GiB on CPU)."""
    from workbench.engine import Engine
    from workbench.engine.rope import round_up

    p = next(model.parameters())
    longest = _longest(req)
    if kv_budget is None:
        if p.device.type == "cuda":
            free = torch.cuda.mem_get_info(p.device)[0]
            weights = sum(t.numel() * t.element_size() for t in model.parameters())
            kv_budget = max(0, (free - weights) // 2)
        else:
            kv_budget = 2 << 30
    spec = ModelSpec.from_hf_config(model.config, strict=True)
    per_slot = round_up(longest + 1, 16) * kv_bytes_per_token(spec.n_layers, spec.n_kv_heads, spec.head_dim,
                                                              p.dtype.itemsize)
    fit = max(2, kv_budget // per_slot)
    rows = max(1, min(batch_size, len(req), fit - 1))
    n_subj = len(set(req.subject_idx.tolist())) if any(req.prefix_ids) else 0
    resident = max(1, min(n_subj, fit - rows))
    return Engine.from_hf(model, max_batch=rows + resident, max_seq=longest, use_graphs=False)


def score(model, req, cfg, engine=None, progress: bool = False) -> tuple[np.ndarray, str]:
    """Dispatch on ``cfg.backend`` (:class:`workbench.eval.mmlu.MMLUConfig`); returns
    ``(ll [n, n_choices] float64, backend used)``. ``"auto"``: the engine when the model is on CUDA
    and the engine runs its architecture, else HF. Raises ValueError for ``backend="engine"`` on a
    model the engine does not run."""
    dev = next(model.parameters()).device
    backend = "engine" if engine is not None else cfg.backend
    if backend == "auto":
        backend = "engine" if dev.type == "cuda" and _engine_supports(model) else "hf"
    if backend == "hf":
        return score_hf(model, req, cfg.batch_size or HF_BATCH, progress), "hf"
    if engine is None and not _engine_supports(model):
        raise ValueError(f"backend='engine': the engine does not run model_type={model.config.model_type!r}; "
                         "use backend='hf'")
    max_tokens = cfg.max_tokens or (16384 if dev.type == "cuda" else 4096)
    rows = cfg.batch_size or ENGINE_ROWS
    eng = engine if engine is not None else build_engine(model, req, rows)
    return score_engine(eng, req, rows, max_tokens, progress), "engine"
