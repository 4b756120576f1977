"""Device-resident speculative decoding: the rejection sampler as batched torch ops on the device and
a loop that feeds device tensors back to the runners.

The fast path beside the readable reference (:func:`workbench.spec.rejection.rejection_sample` and
the reference loop in :mod:`workbench.spec.generate`), tested against it with the same chi-square
test (the output follows the target's distribution) and for greedy token equality. Same rule
(Leviathan et al. 2023, arXiv 2211.17192, Algorithm 1; vLLM ``v1/sample/rejection_sampler.py``):
accept x_i ~ q_i while ``u_i q_i(x_i) < p_i(x_i)``; at the first rejection draw from
norm(max(0, p_i - q_i)); after k acceptances draw the bonus token from p_{k+1}. What differs:

* tokens are drawn by the exponential race (:func:`workbench.spec.sampling.sample_race`), never by
  ``torch.multinomial``: no host synchronization, and one ``[B, V]`` noise draw serves the one
  recovered or bonus token of each row (as vLLM's ``sample_recovered_tokens``);
* greedy decoding (T = 0) compares argmaxes directly instead of building one-hot ``[k+1, V]``
  distributions (the same rule, see :func:`workbench.spec.sampling.probs_from_logits`);
* the loop (:func:`device_speculative_generate`) samples each draft token on the device and feeds
  that tensor to the next draft step, so on CUDA the k draft steps (``T = 1`` CUDA-graph replays of
  :class:`workbench.engine.Engine`), the verify step (``T = k + 1``) and the sampler are queued
  without the host waiting. The host synchronizes once per step, reading the accepted count and the
  emitted tokens (one ``[k + 2]`` int64 copy): it needs them to roll the KV caches back
  (``truncate``), to check stop tokens and the budget. The ``confidence`` policy reads q(x) after each
  draft token (it decides on the host whether to go on): one synchronization per draft token.
* step times come from CUDA events on CUDA (read once, after the loop), from ``clock`` elsewhere.

``synthetic_alpha`` replaces the acceptance test by ``u_i < alpha`` (vLLM
``rejection_sample_method="synthetic"``; a timing what-if whose tokens do not follow the target).
"""

from __future__ import annotations

import time

import torch

from workbench.spec.config import SpecConfig
from workbench.spec.metrics import SpecDecodingStats
from workbench.spec.policies import make_policy
from workbench.spec.rejection import PLACEHOLDER
from workbench.spec.result import GenerationResult
from workbench.spec.sampling import make_generator, probs_from_logits, sample_race


def sample_from_logits(logits: torch.Tensor, temperature: float, top_p: float = 1.0,
                       generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One token per row of ``logits`` ``[..., V]``: ``(tokens [...] int64, probs [..., V] float32)``
    on the logits' device, ``probs`` the warped distribution drawn from (temperature, top-p; see
    :func:`probs_from_logits`) or ``None`` for greedy decoding (``temperature == 0``: the argmax)."""
    if temperature == 0:
        return logits.argmax(-1), None
    probs = probs_from_logits(logits, temperature, top_p)
    return sample_race(probs, generator), probs


def rejection_sample_fast(
    draft_tokens: torch.Tensor,  # [B, k] int64, x_i ~ q_i
    draft_probs: torch.Tensor | None,  # [B, k, V] float32 q_i(.); None for greedy
    target_logits: torch.Tensor,  # [B, k+1, V] from one target forward over [last, x_1..x_k]
    temperature: float,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    synthetic_alpha: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify ``k`` draft tokens per row on the device: ``(output_tokens [B, k+1] int64,
    num_accepted [B] int64)``, laid out as :func:`workbench.spec.rejection.rejection_sample` (row b
    emits ``num_accepted[b] + 1`` tokens, then ``PLACEHOLDER``).

    ``temperature``/``top_p`` warp the target logits as the drafts' were warped. With the same
    ``generator`` state the acceptance uniforms are the reference's (``torch.rand(B, k)`` drawn first),
    so both accept the same drafts; the recovered or bonus token is drawn by the exponential race.
    ``synthetic_alpha``: accept each tested draft with this probability instead (timing what-if).
    Raises ``ValueError`` on inconsistent shapes.
    """
    B, k = draft_tokens.shape
    V = target_logits.shape[-1]
    greedy = temperature == 0
    if target_logits.shape != (B, k + 1, V) or (not greedy and (draft_probs is None or draft_probs.shape != (B, k, V))):
        raise ValueError(f"shapes disagree: draft_tokens {tuple(draft_tokens.shape)}, draft_probs "
                         f"{None if draft_probs is None else tuple(draft_probs.shape)}, target_logits "
                         f"{tuple(target_logits.shape)}; expected [B, k], [B, k, V] (None if greedy), [B, k+1, V]")
    dev = target_logits.device
    pos = torch.arange(k + 1, device=dev)
    if greedy:  # one-hot p and q: accept while the argmaxes match, then emit the target's argmax
        t_arg = target_logits.argmax(-1)  # [B, k+1]
        if synthetic_alpha is None:
            accepted = draft_tokens == t_arg[:, :k]
        else:
            accepted = torch.rand(B, k, generator=generator, device=dev) < synthetic_alpha
        num_accepted = accepted.long().cumprod(dim=1).sum(dim=1)  # [B]
        out = torch.where(pos < num_accepted.unsqueeze(1), torch.cat([draft_tokens, t_arg[:, k:]], 1), t_arg)
        return torch.where(pos <= num_accepted.unsqueeze(1), out, PLACEHOLDER), num_accepted
    p = probs_from_logits(target_logits, temperature, top_p)  # [B, k+1, V]
    x = draft_tokens.unsqueeze(-1)  # [B, k, 1]
    u = torch.rand(B, k, generator=generator, device=dev)
    if synthetic_alpha is None:
        accepted = u * draft_probs.gather(-1, x).squeeze(-1) < p[:, :k].gather(-1, x).squeeze(-1)
    else:
        accepted = u < synthetic_alpha
    num_accepted = accepted.long().cumprod(dim=1).sum(dim=1)  # [B]
    # residual max(0, p - q) at position num_accepted, q_{k+1} = 0 (the bonus distribution is p_{k+1})
    at = num_accepted.view(B, 1, 1).expand(B, 1, V)
    p_n = p.gather(1, at).squeeze(1)  # [B, V]
    q_n = torch.cat([draft_probs, draft_probs.new_zeros(B, 1, V)], 1).gather(1, at).squeeze(1)
    residual = (p_n - q_n).clamp_min(0)
    # an all-zero residual has probability 0 (p <= q everywhere); fall back to p against round-off
    residual = torch.where(residual.sum(-1, keepdim=True) > 0, residual, p_n)
    extra = sample_race(residual, generator)  # [B]
    out = torch.where(pos[:k] < num_accepted.unsqueeze(1), draft_tokens, PLACEHOLDER)
    out = torch.cat([out, out.new_full((B, 1), PLACEHOLDER)], 1)
    return out.scatter(1, num_accepted.unsqueeze(1), extra.unsqueeze(1)), num_accepted


class _StepClock:
    """Marks between phases: CUDA events on CUDA (elapsed times read after the loop), else ``clock``."""

    def __init__(self, device: torch.device, clock):
        self.cuda, self.clock = device.type == "cuda", clock

    def mark(self):
        if not self.cuda:
            return self.clock()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, a, b) -> float:
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a


def device_speculative_generate(target, draft, prompt: list[int], config: SpecConfig, *,
                                generator: torch.Generator | None = None, stop_token_ids=(),
                                clock=time.perf_counter) -> GenerationResult:
    """Speculative decoding with the tokens kept on the device (see the module docstring).

    ``target``, ``draft``: :class:`workbench.engine.api.Runner` objects on one device (Engine slot
    runners replay CUDA graphs for the draft and verify steps; any runner works, on the CPU too);
    ``prompt``: non-empty list of token ids. Same invariant, KV rollback and statistics as the
    reference loop (:func:`workbench.spec.generate.speculative_generate`): both caches hold a prefix
    of the committed sequence missing at least its last token. Returns a ``GenerationResult`` with
    ``loop="device"``.
    """
    cfg, dev = config, target.device
    stop = set(stop_token_ids)
    gen = make_generator(generator, cfg.seed, dev)
    pol, stats, timer = make_policy(cfg), SpecDecodingStats(), _StepClock(dev, clock)
    target.reset()
    draft.reset()
    t0 = clock()
    if len(prompt) > 1:  # cache all but the last prompt token
        ctx = torch.tensor(prompt[:-1], device=dev)
        target.extend(ctx)
        draft.extend(ctx.to(draft.device))
    target.synchronize()
    draft.synchronize()
    prefill_s = clock() - t0
    seq = list(prompt)
    last = torch.tensor(prompt[-1:], device=dev)  # [1] the token the target's cache lacks
    pending = last  # [1] or [2]: the tokens the draft's cache lacks
    steps = []  # (drafted, accepted, marks)
    t_start = clock()
    while len(seq) - len(prompt) < cfg.max_new_tokens:
        k_step = pol.next_k()
        m0 = timer.mark()
        logits = draft.extend(pending.to(draft.device))[-1]  # [V]
        drafts, qs = [], []
        for i in range(k_step):
            x, q = sample_from_logits(logits, cfg.temperature, cfg.top_p, gen)  # x: [] on the device
            drafts.append(x)
            qs.append(q)
            if i == k_step - 1 or (q is not None and pol.stop_drafting(q, x)):
                break
            logits = draft.extend(x.view(1))[-1]
        m1 = timer.mark()
        m = len(drafts)
        x_all = torch.stack(drafts).to(dev)  # [m]
        p_logits = target.extend(torch.cat([last, x_all]))[-(m + 1):]  # [m+1, V]
        q_all = None if qs[0] is None else torch.stack(qs).to(dev)[None]  # [1, m, V]
        out, n_acc = rejection_sample_fast(x_all[None], q_all, p_logits[None], cfg.temperature, cfg.top_p, gen,
                                           cfg.synthetic_alpha)
        m2 = timer.mark()
        host = torch.cat([n_acc, out[0]]).tolist()  # the one synchronization of the step
        n = host[0]
        emitted = host[1: n + 2][: cfg.max_new_tokens - (len(seq) - len(prompt))]
        cut = next((i for i, t in enumerate(emitted) if t in stop), None)
        emitted = emitted if cut is None else emitted[: cut + 1]
        seq += emitted
        target.truncate(len(seq) - 1)  # KV rollback: committed tokens minus the newest one
        draft.truncate(min(draft.length, len(seq) - 1))
        steps.append((m, n, m0, m1, m2))
        pol.update(n, m)
        if cut is not None:
            break
        last = out[0, n: n + 1]
        pending = out[0, n + 1 - (len(seq) - draft.length): n + 1]  # 1 token, or [x_m, bonus]
    target.synchronize()
    decode_s = clock() - t_start
    for m, n, m0, m1, m2 in steps:
        stats.observe(m, n, timer.seconds(m0, m1), timer.seconds(m1, m2))
    step_times = [a + b for a, b in zip(stats.draft_times_s, stats.target_times_s)]
    return GenerationResult(seq[len(prompt):], prefill_s, decode_s, step_times, stats=stats, loop="device")


__all__ = ["device_speculative_generate", "rejection_sample_fast", "sample_from_logits"]
