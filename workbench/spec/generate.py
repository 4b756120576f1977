"""Speculative and plain autoregressive decoding through the runner protocol.

Both loops drive :class:`workbench.engine.api.Runner` objects (``reset``, ``length``, ``extend``,
``truncate``, ``synchronize``), so the HF reference runner and the fast engine plug in unchanged, and
plain and speculative decoding are timed through the same forward path. A ``torch.nn.Module`` is
wrapped in :class:`workbench.engine.HFRunner`.

Two speculative loops, one rule: ``loop="reference"`` is the readable loop below (host-side token
lists, :func:`workbench.spec.rejection.rejection_sample`); ``loop="device"`` is
:func:`workbench.spec.fast.device_speculative_generate` (tokens stay on the device, one host
synchronization per step). ``loop="auto"`` takes the device loop when both runners are
:class:`workbench.engine.SlotRunner` views of the engine (or for ``acceptance="synthetic"``, which
only the device loop implements), else the reference loop.
"""

from __future__ import annotations

import time

import torch

from workbench.engine.api import Runner
from workbench.engine.engine import SlotRunner
from workbench.engine.hf_runner import HFRunner
from workbench.spec.config import SpecConfig, did_you_mean
from workbench.spec.fast import device_speculative_generate, sample_from_logits
from workbench.spec.metrics import SpecDecodingStats
from workbench.spec.policies import make_policy
from workbench.spec.rejection import rejection_sample
from workbench.spec.result import GenerationResult
from workbench.spec.sampling import make_generator, probs_from_logits, sample

LOOP_NAMES = ("auto", "reference", "device")


def as_runner(model_or_runner) -> Runner:
    """Return ``model_or_runner`` if it is a :class:`Runner`, else wrap the module in ``HFRunner``."""
    if isinstance(model_or_runner, Runner):
        return model_or_runner
    if isinstance(model_or_runner, torch.nn.Module):
        return HFRunner(model_or_runner)
    raise TypeError(f"expected a Runner or a torch.nn.Module, got {type(model_or_runner).__name__}")


def _config(config: SpecConfig | None, **kw) -> SpecConfig:
    return config if config is not None else SpecConfig(**kw)


def _prompt_list(prompt_ids) -> list[int]:
    ids = torch.as_tensor(prompt_ids).reshape(-1).tolist()
    if not ids:
        raise ValueError("prompt_ids is empty; pass at least one token (e.g. the BOS token)")
    return [int(t) for t in ids]


def _timed(runner: Runner, t0: float, clock=time.perf_counter) -> float:
    runner.synchronize()
    return clock() - t0


def _stop_index(tokens: list[int], stop: set[int]) -> int | None:
    for i, t in enumerate(tokens):
        if t in stop:
            return i
    return None


def autoregressive_generate(model, prompt_ids, temperature: float = 0.0, top_p: float = 1.0,
                            max_new_tokens: int = 32, *, config: SpecConfig | None = None,
                            generator: torch.Generator | None = None, seed: int = 0,
                            stop_token_ids=(), return_logits: bool = False,
                            clock=time.perf_counter) -> GenerationResult:
    """Plain decoding, one target forward per token: the baseline speculative decoding must beat.

    ``model``: a Runner or module; ``prompt_ids``: ``[T]`` int64. ``config`` (if given) supplies
    temperature, top_p and max_new_tokens. The runner is reset first. Tokens are drawn on the
    logits' device (:func:`workbench.spec.fast.sample_from_logits`: the argmax at temperature 0, else
    the draw ``torch.multinomial`` makes) and fed back as device tensors. ``clock``: the timer
    (``time.perf_counter`` wall time; ``time.process_time`` gives this process's CPU time, robust to
    other jobs on a shared CPU, meaningless on a GPU). Raises ``ValueError`` for bad
    sampling settings or an empty prompt.
    """
    cfg = _config(config, temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed)
    runner = as_runner(model)
    prompt, stop = _prompt_list(prompt_ids), set(stop_token_ids)
    runner.reset()
    t0 = clock()
    logits = runner.extend(torch.tensor(prompt))[-1]  # [V]
    prefill_s = _timed(runner, t0, clock)
    gen = make_generator(generator, cfg.seed, logits.device)
    out, times, kept = [], [], []
    t_start = clock()
    while True:
        if return_logits:
            kept.append(logits)
        tok_d, _ = sample_from_logits(logits, cfg.temperature, cfg.top_p, gen)  # [] on the device
        tok = int(tok_d)  # the host needs each token (stop check): one synchronization per token
        out.append(tok)
        if len(out) >= cfg.max_new_tokens or tok in stop:
            break
        t0 = clock()
        logits = runner.extend(tok_d.view(1))[-1]  # the device tensor: no host-to-device copy
        times.append(_timed(runner, t0, clock))
    decode_s = clock() - t_start
    return GenerationResult(out, prefill_s, decode_s, times,
                            logits=torch.stack(kept) if return_logits else None)


def resolve_loop(loop: str, target, draft, config: SpecConfig) -> str:
    """``"reference"`` or ``"device"`` for a ``loop`` name (see the module docstring); raises
    ``ValueError`` for an unknown name (with "did you mean") or ``acceptance="synthetic"`` with the
    reference loop."""
    if loop not in LOOP_NAMES:
        raise ValueError(f"loop={loop!r} is unknown; use one of {LOOP_NAMES}." + did_you_mean(loop, LOOP_NAMES))
    if loop == "auto":
        engine = isinstance(target, SlotRunner) and isinstance(draft, SlotRunner)
        return "device" if engine or config.acceptance == "synthetic" else "reference"
    if loop == "reference" and config.acceptance == "synthetic":
        raise ValueError("acceptance='synthetic' is a timing what-if of the device loop; use loop='device' "
                         "(or 'auto')")
    return loop


def speculative_generate(target, draft, prompt_ids, k: int = 4, temperature: float = 0.0,
                         top_p: float = 1.0, policy: str = "static", max_new_tokens: int = 32, *,
                         config: SpecConfig | None = None, generator: torch.Generator | None = None,
                         seed: int = 0, stop_token_ids=(), clock=time.perf_counter,
                         loop: str = "auto") -> GenerationResult:
    """Speculative decoding (Leviathan et al. 2023, Algorithm 1) with KV caches kept for both models.

    ``target``, ``draft``: Runners (or modules, wrapped in ``HFRunner``) over one vocabulary; a ``draft``
    with a ``propose(context, k)`` method (:class:`workbench.spec.ngram.NgramProposer`) runs
    :func:`workbench.spec.ngram.proposer_generate` instead (vLLM's schedule; ``result.loop="proposer"``);
    ``prompt_ids``: ``[T]`` int64. ``config`` (if given) replaces the keyword settings. ``loop``:
    ``"auto"`` | ``"reference"`` | ``"device"`` (module docstring); ``result.loop`` says which ran.

    Invariant between steps: both caches hold a prefix of the committed sequence ``seq`` that misses
    at least its last token. A step: the draft extends over the tokens it lacks and proposes up to k
    tokens (one forward each, the policy may stop early); the target scores ``[last, x_1..x_m]`` in
    one forward (m + 1 logits); :func:`rejection_sample` accepts n <= m and emits one more token;
    both caches are truncated to ``len(seq) - 1`` at most, dropping the rejected positions' KV.

    ``clock``: timer, as in :func:`autoregressive_generate`.

    Returns a :class:`GenerationResult` with ``stats`` (``SpecDecodingStats``, per-step draft and
    target times). Raises ``ValueError`` on bad settings (k < 1, temperature < 0, top_p outside
    (0, 1], unknown policy or loop) or when the runners' vocabulary sizes differ.
    """
    cfg = _config(config, k=k, temperature=temperature, top_p=top_p, policy=policy,
                  max_new_tokens=max_new_tokens, seed=seed, k_max=max(16, k))
    if callable(getattr(draft, "propose", None)):  # a token proposer (n-gram): vLLM's schedule, its own loop
        from workbench.spec.ngram import proposer_generate

        return proposer_generate(target, draft, prompt_ids, cfg, generator=generator,
                                 stop_token_ids=stop_token_ids, clock=clock)
    t_run, d_run = as_runner(target), as_runner(draft)
    if t_run.vocab_size != d_run.vocab_size:
        raise ValueError(f"target vocab_size {t_run.vocab_size} != draft vocab_size {d_run.vocab_size}: "
                         "speculative decoding needs one vocabulary (check_tokenizers_match)")
    prompt = _prompt_list(prompt_ids)
    if resolve_loop(loop, t_run, d_run, cfg) == "device":
        return device_speculative_generate(t_run, d_run, prompt, cfg, generator=generator,
                                           stop_token_ids=stop_token_ids, clock=clock)
    return _reference_loop(t_run, d_run, prompt, cfg, generator, set(stop_token_ids), clock)


def _reference_loop(t_run: Runner, d_run: Runner, prompt: list[int], cfg: SpecConfig,
                    generator: torch.Generator | None, stop: set, clock) -> GenerationResult:
    """The readable loop of :func:`speculative_generate` (host-side token lists)."""
    gen = None
    seq, pol, stats = list(prompt), make_policy(cfg), SpecDecodingStats()
    t_run.reset()
    d_run.reset()
    t0 = clock()
    if len(prompt) > 1:  # cache all but the last prompt token; each step feeds what a cache lacks
        t_run.extend(torch.tensor(prompt[:-1]))
        d_run.extend(torch.tensor(prompt[:-1]))
    t_run.synchronize()
    prefill_s = _timed(d_run, t0, clock)
    t_start = clock()
    while len(seq) - len(prompt) < cfg.max_new_tokens:
        k_step = pol.next_k()  # not capped near the end: every step is a full step for the stats
        # draft: up to k_step tokens, x_i ~ q_i
        t0 = clock()
        logits = d_run.extend(torch.tensor(seq[d_run.length:]))[-1]  # [V]
        if gen is None:
            gen = make_generator(generator, cfg.seed, logits.device)
        drafts, qs = [], []
        for i in range(k_step):
            q = probs_from_logits(logits, cfg.temperature, cfg.top_p)  # [V]
            x = int(sample(q, gen))
            drafts.append(x)
            qs.append(q)
            if i == k_step - 1 or pol.stop_drafting(q, x):
                break
            logits = d_run.extend(torch.tensor([x]))[-1]
        draft_s = _timed(d_run, t0, clock)
        # verify: one target forward over [last committed token, x_1..x_m] -> m + 1 distributions
        t0 = clock()
        m = len(drafts)
        p_logits = t_run.extend(torch.tensor(seq[t_run.length:] + drafts))[-(m + 1):]  # [m+1, V]
        ps = probs_from_logits(p_logits, cfg.temperature, cfg.top_p)
        out, n_acc = rejection_sample(torch.tensor([drafts], device=ps.device), torch.stack(qs)[None].to(ps.device),
                                      ps[None], gen)
        n = int(n_acc[0])
        target_s = _timed(t_run, t0, clock)
        # commit at most the remaining budget, up to and including a stop token
        emitted = out[0, : n + 1].tolist()[: cfg.max_new_tokens - (len(seq) - len(prompt))]
        cut = _stop_index(emitted, stop)
        emitted = emitted if cut is None else emitted[: cut + 1]
        seq += emitted
        # KV rollback: keep only positions of committed tokens, minus the newest one
        t_run.truncate(len(seq) - 1)
        d_run.truncate(min(d_run.length, len(seq) - 1))
        stats.observe(m, n, draft_s, target_s)
        pol.update(n, m)
        if cut is not None:
            break
    decode_s = clock() - t_start
    new = seq[len(prompt):]
    step_times = [a + b for a, b in zip(stats.draft_times_s, stats.target_times_s)]
    return GenerationResult(new, prefill_s, decode_s, step_times, stats=stats, loop="reference")


__all__ = ["LOOP_NAMES", "GenerationResult", "as_runner", "autoregressive_generate", "resolve_loop",
           "speculative_generate"]
