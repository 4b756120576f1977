"""Distil a shallow draft from the target: a few decoder layers trained on the target's logits.

The draft shares the target's token embeddings and LM head (frozen, no copy), so it speaks the same
vocabulary by construction and only its decoder layers and final norm train. The loss is the
token-level KL(p_target || q_draft) at temperature 1 (Hinton et al. 2015; the "forward KL" of
DistillSpec, Zhou et al. 2023, arXiv 2310.08461, whose point is that a lower divergence raises the
acceptance rate alpha = sum_x min(p, q)).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import math
import time

import numpy as np
import pandas as pd
import torch

from workbench import divergence


def _draft_model(target: torch.nn.Module, draft_config, n_layers: int, init: str) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    if draft_config is None or isinstance(draft_config, dict):
        cfg = copy.deepcopy(target.config)
        cfg.num_hidden_layers = n_layers
        if getattr(cfg, "layer_types", None) is not None:
            cfg.layer_types = list(cfg.layer_types)[:n_layers]
        for key, val in (draft_config or {}).items():
            setattr(cfg, key, val)
    else:
        cfg = draft_config
    if cfg.hidden_size != target.config.hidden_size or cfg.vocab_size != target.config.vocab_size:
        raise ValueError(f"draft_config hidden_size/vocab_size ({cfg.hidden_size}, {cfg.vocab_size}) must equal "
                         f"the target's ({target.config.hidden_size}, {target.config.vocab_size}) to share "
                         "its embeddings and head")
    if init not in ("spread", "random"):
        raise ValueError(f"init={init!r} must be 'spread' (copy evenly spaced target layers) or 'random'")
    p = next(target.parameters())  # the draft trains in the target's dtype (it shares its embeddings)
    draft = AutoModelForCausalLM.from_config(cfg).to(device=p.device, dtype=p.dtype)
    emb = torch.nn.Parameter(target.get_input_embeddings().weight.detach(), requires_grad=False)
    draft.get_input_embeddings().weight = emb
    head = target.get_output_embeddings().weight
    draft.get_output_embeddings().weight = emb if head is target.get_input_embeddings().weight else \
        torch.nn.Parameter(head.detach(), requires_grad=False)
    if init == "spread":  # copy target layers at evenly spaced depths (first and last for 2 layers)
        src = np.linspace(0, target.config.num_hidden_layers - 1, cfg.num_hidden_layers).round().astype(int)
        for i, j in enumerate(src):
            draft.model.layers[i].load_state_dict(target.model.layers[int(j)].state_dict())
        draft.model.norm.load_state_dict(target.model.norm.state_dict())
    return draft


def _sha256(ids: torch.Tensor) -> str:
    """sha256 of token ids (int64 bytes): the identity of the distillation data."""
    return hashlib.sha256(ids.detach().to("cpu", torch.int64).contiguous().numpy().tobytes()).hexdigest()


@contextlib.contextmanager
def _seeded(seed: int, device: torch.device):
    """Run the block with torch's global RNG seeded to ``seed``, then restore the caller's RNG state
    (CPU, and every CUDA device when ``device`` is CUDA): library code must not reseed it."""
    devices = list(range(torch.cuda.device_count())) if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def _kl_and_alpha(t_logits: torch.Tensor, d_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean KL(p || q) (nats, differentiable in ``d_logits``) and mean sum min(p, q) over ``[..., V]``."""
    logp, logq = divergence.log_probs(t_logits), divergence.log_probs(d_logits)
    kl = divergence.kl(logp, logq).mean()
    alpha = divergence.overlap(logp.exp(), logq.detach().exp()).mean()
    return kl, alpha


def target_generations(target: torch.nn.Module, prompts, *, max_new_tokens: int = 128,
                       temperature: float = 0.0, samples: int = 1, batch_size: int = 32, pad_token_id: int = 0,
                       eos_token_id: int | None = None, seed: int = 0) -> torch.Tensor:
    """Distillation data from the target itself: each prompt followed by the target's continuation.

    Training a draft on text the target *generates* (rather than on a corpus such as WikiText)
    matches the distribution the draft must predict at decode time; DistillSpec (Zhou et al. 2023,
    arXiv 2310.08461, Sec. 4) finds such on-policy data raises acceptance. Decoding is HF
    ``generate`` with left padding, batched; it is data preparation, not a timing.

    Args:
        target: a causal LM (HF module).
        prompts: sequences of token ids (``list[list[int]]``, e.g. chat-templated prompts from
            :func:`workbench.spec.run.encode_prompts`), none of which may be used for evaluation.
        max_new_tokens: tokens generated per prompt and sample (fewer when EOS comes first).
        temperature: 0 = greedy (``samples`` must then be 1), else multinomial sampling at it.
        samples: continuations per prompt.
        eos_token_id: stop token (generation of a sequence ends after it; it is kept).

    Returns:
        ``[N]`` int64 (CPU): for each prompt and sample, its prompt ids then its continuation, all
        concatenated; ready for ``distill_draft(text=...)``.

    Raises:
        ValueError: empty ``prompts`` or prompt, ``temperature < 0``, ``samples > 1`` with greedy
        decoding, ``max_new_tokens < 1``.
    """
    prompts = [[int(t) for t in p] for p in prompts]
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts must be a non-empty list of non-empty token-id lists")
    if temperature < 0 or max_new_tokens < 1 or samples < 1:
        raise ValueError(f"need temperature >= 0, max_new_tokens >= 1, samples >= 1 "
                         f"(got {temperature}, {max_new_tokens}, {samples})")
    if temperature == 0 and samples > 1:
        raise ValueError("greedy decoding (temperature=0) gives one continuation per prompt; set samples=1")
    device = next(target.parameters()).device
    jobs = [p for p in prompts for _ in range(samples)]
    out = []
    with _seeded(seed, device):  # HF sampling draws from the global RNG; the caller's state is restored
        for i in range(0, len(jobs), batch_size):
            out.extend(_generate_batch(target, jobs[i:i + batch_size], device, max_new_tokens, temperature,
                                       pad_token_id, eos_token_id))
    return torch.tensor(out, dtype=torch.long)


def _generate_batch(target, chunk: list[list[int]], device, max_new_tokens: int, temperature: float,
                    pad_token_id: int, eos_token_id: int | None) -> list[int]:
    """One left-padded HF ``generate`` call: each prompt's ids then its continuation, concatenated."""
    width = max(len(p) for p in chunk)
    ids = torch.tensor([[pad_token_id] * (width - len(p)) + p for p in chunk], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk], device=device)
    kw = {"do_sample": True, "temperature": temperature, "top_p": 1.0, "top_k": 0} if temperature > 0 \
        else {"do_sample": False}
    with torch.no_grad():
        gen = target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                              pad_token_id=pad_token_id, eos_token_id=eos_token_id, **kw)
    out = []
    for p, row in zip(chunk, gen[:, width:].tolist()):
        if eos_token_id is not None and eos_token_id in row:
            row = row[: row.index(eos_token_id) + 1]
        out.extend(p + row)
    return out


def _train_eval_ids(target, text, eval_text, tokenizer, seq_len: int,
                    eval_windows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Training ids ``[N]`` and held-out windows ``[eval_windows, seq_len]`` (int64) for
    :func:`distill_draft` (its ``text``, ``eval_text`` and ``tokenizer`` arguments)."""
    if text is None:
        from workbench.data import load_text

        text = load_text("wikitext-2", "valid")

    def encode(t) -> torch.Tensor:
        nonlocal tokenizer
        if isinstance(t, str):
            if tokenizer is None:
                from transformers import AutoTokenizer

                tokenizer = AutoTokenizer.from_pretrained(target.name_or_path)
            return torch.tensor(tokenizer(t, add_special_tokens=False)["input_ids"], dtype=torch.long)
        return torch.as_tensor(t, dtype=torch.long).reshape(-1)

    ids, n_win = encode(text), eval_windows * seq_len
    if eval_text is not None:
        eval_ids = encode(eval_text)
        if len(eval_ids) < n_win or len(ids) < seq_len + 1:
            raise ValueError(f"eval_text has {len(eval_ids)} tokens and text {len(ids)}; need at least "
                             f"{n_win} (eval_windows * seq_len) and {seq_len + 1}")
        train_ids, eval_ids = ids, eval_ids[:n_win].reshape(eval_windows, seq_len)
    else:
        n_eval = max(n_win, len(ids) // 10)
        if len(ids) - n_eval < seq_len + 1:
            raise ValueError(f"text has {len(ids)} tokens; need more than {n_eval + seq_len + 1} "
                             f"(eval_windows * seq_len held out + one training window)")
        train_ids, eval_ids = ids[:-n_eval], ids[-n_eval:][:n_win].reshape(eval_windows, seq_len)
    return train_ids, eval_ids


def distill_draft(target: torch.nn.Module, draft_config=None, text=None, steps: int = 100, *,
                  tokenizer=None, n_layers: int = 2, seq_len: int = 64, batch_size: int = 4,
                  lr: float = 1e-3, init: str = "spread", eval_every: int = 10, eval_windows: int = 4,
                  seed: int = 0, eval_text=None) -> tuple[torch.nn.Module, pd.DataFrame]:
    """Train a shallow draft on the target's logits with KL(p || q); return ``(draft, curve)``.

    Args:
        target: a Llama-style causal LM (``model.model.layers``, ``model.model.norm``); not modified.
        draft_config: ``None`` (a copy of the target's config with ``n_layers`` layers), a dict of
            overrides on that copy, or a full transformers config (hidden and vocab sizes must match).
        text: training text (``str``; default WikiText-2 valid split) or token ids ``[N]`` int64.
            The last 10% (at least ``eval_windows * seq_len`` tokens) is held out for the curve,
            unless ``eval_text`` is given.
        eval_text: text or token ids for the curve's ``eval_windows`` windows (then all of ``text``
            trains). Give it when ``text`` is built from prompts, so the curve uses prompts never
            trained on (the tail of ``text`` may share prompts with its head).
        steps: AdamW steps on ``batch_size`` random windows of ``seq_len`` tokens.
        tokenizer: encodes ``text`` (default: ``AutoTokenizer`` of ``target.name_or_path``).
        init: ``"spread"`` copies evenly spaced target layers (and the final norm) as the start point;
            ``"random"`` keeps the random init.

    Returns:
        ``draft`` (eval mode, no grads) and ``curve``: DataFrame ``step, loss, kl, alpha_pred,
        greedy_match, elapsed_s`` -- ``loss`` the training KL of that step, ``kl`` / ``alpha_pred`` /
        ``greedy_match`` on the held-out windows (nats / fraction), step 0 = before training.

    Raises:
        ValueError: incompatible ``draft_config``, bad ``init``, ``steps < 0``, text too short.
    """
    if steps < 0:
        raise ValueError(f"steps={steps} must be >= 0")
    train_ids, eval_ids = _train_eval_ids(target, text, eval_text, tokenizer, seq_len, eval_windows)
    gen = torch.Generator().manual_seed(seed)
    device = next(target.parameters()).device
    with _seeded(seed, device):  # the random init; the caller's RNG state is left as it was
        draft = _draft_model(target, draft_config, n_layers, init)
    eval_ids = eval_ids.to(device)
    with torch.no_grad():
        eval_target = target(input_ids=eval_ids).logits  # [W, T, V]
    params = [p for p in draft.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    rows, t0, loss_val = [], time.perf_counter(), math.nan

    def evaluate(step: int) -> None:
        draft.eval()
        with torch.no_grad():
            d = draft(input_ids=eval_ids).logits
            kl, alpha = _kl_and_alpha(eval_target, d)
            match = divergence.top1_agreement(d, eval_target).mean()
        rows.append({"step": step, "loss": loss_val, "kl": float(kl), "alpha_pred": float(alpha),
                     "greedy_match": float(match), "elapsed_s": time.perf_counter() - t0})
        draft.train()

    evaluate(0)
    for step in range(1, steps + 1):
        starts = torch.randint(0, len(train_ids) - seq_len, (batch_size,), generator=gen)
        batch = torch.stack([train_ids[s: s + seq_len] for s in starts.tolist()]).to(device)  # [B, T]
        with torch.no_grad():
            t_logits = target(input_ids=batch).logits
        kl, _ = _kl_and_alpha(t_logits, draft(input_ids=batch).logits)
        opt.zero_grad(set_to_none=True)
        kl.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        loss_val = float(kl.detach())
        if step % eval_every == 0 or step == steps:
            evaluate(step)
    draft.eval().requires_grad_(False)
    draft.workbench_provenance = {"draft": "distilled", "steps": steps, "n_layers": draft.config.num_hidden_layers,
                                  "seq_len": seq_len, "batch_size": batch_size, "lr": lr, "init": init, "seed": seed,
                                  "train_tokens": len(train_ids), "train_sha256": _sha256(train_ids),
                                  "eval_sha256": _sha256(eval_ids)}
    return draft, pd.DataFrame(rows)


__all__ = ["distill_draft", "target_generations"]
