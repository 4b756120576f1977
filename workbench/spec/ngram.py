"""N-gram (prompt-lookup) drafting with vLLM's semantics, and the speculative loop for token proposers.

An n-gram draft has no model: it looks for the sequence's own last tokens earlier in the sequence
(prompt and output so far) and proposes the tokens that followed them there (Saxena 2023, "prompt lookup
decoding"; vLLM ``speculative_config={"method": "ngram", ...}``). The rule, as vLLM 0.32 / 0.33 implement it
(``vllm/v1/spec_decode/ngram_proposer.py``, ``_find_longest_matched_ngram_and_propose_tokens``, a KMP
scan of the reversed context; read from the installed wheel):

* ``n`` runs from ``prompt_lookup_max`` down to ``prompt_lookup_min``: the **longest** suffix n-gram that
  occurs earlier wins (the match may overlap the suffix itself, never be it);
* among the occurrences of that n-gram vLLM takes the **earliest** (its scan updates the position on
  ``prev_lps >= longest_ngram`` walking the reversed tokens, i.e. towards the start of the sequence);
* the proposal is the ``k`` tokens after the match, fewer when the sequence ends first (so a proposal may
  be shorter than ``k``, or empty), and none past ``max_model_len`` (``k = min(k, max_model_len - len)``);
  a context shorter than ``prompt_lookup_min`` proposes nothing.

vLLM's defaults (``vllm/config/speculative.py``, ``SpeculativeConfig.__post_init__``): both bounds 5 when
neither is set, else the missing one copies the other.

Verification (vLLM ``v1/sample/rejection_sampler.py`` with ``draft_probs=None``): an n-gram token is a
draft with q(x) = 1, so exact speculative sampling (Leviathan et al. 2023, arXiv 2211.17192, Algorithm 1)
accepts it with probability min(1, p(x) / 1) = p(x) and on rejection draws from norm(max(0, p - q)), i.e.
p with x removed. :func:`proposer_generate` runs that through
:func:`workbench.spec.rejection.rejection_sample` with one-hot q.

Schedule (vLLM v1's): the prefill step emits the first token with no draft; after each step the proposer
drafts from every token so far; a step with an empty proposal is a plain decode step and is not counted
as a draft (vLLM's ``SpecDecodingStats`` counts requests that carried draft tokens).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from workbench.spec.config import SpecConfig
from workbench.spec.metrics import SpecDecodingStats
from workbench.spec.rejection import rejection_sample
from workbench.spec.result import GenerationResult
from workbench.spec.sampling import make_generator, probs_from_logits, sample

DEFAULT_LOOKUP = 5  # vLLM's prompt_lookup_min and prompt_lookup_max when neither is set


def ngram_propose(context: Sequence[int], k: int, prompt_lookup_min: int = DEFAULT_LOOKUP,
                  prompt_lookup_max: int = DEFAULT_LOOKUP, max_model_len: int | None = None) -> list[int]:
    """Up to ``k`` draft tokens for ``context`` (token ids, prompt and output so far), vLLM's rule.

    Reference form of vLLM's ``_find_longest_matched_ngram_and_propose_tokens`` (module docstring): for
    n = ``prompt_lookup_max`` .. ``prompt_lookup_min``, the earliest start s < len - n with
    ``context[s:s+n] == context[-n:]`` gives ``context[s+n : s+n+k']``, k' = min(k, len - s - n,
    max_model_len - len). O(len * n) per call; vLLM's KMP scan gives the same answer in O(len).

    Returns a list of 0..k ints (empty: no match, or no room). Raises ``ValueError`` for k < 1, a
    ``prompt_lookup_min`` < 1 or a ``prompt_lookup_max`` below it (vLLM's own checks).
    """
    _check(k, prompt_lookup_min, prompt_lookup_max)
    toks = list(context)
    total = len(toks)
    if max_model_len is not None:
        k = min(k, max_model_len - total)
    if total < prompt_lookup_min or k <= 0:
        return []
    for n in range(min(prompt_lookup_max, total - 1), prompt_lookup_min - 1, -1):
        suffix = toks[total - n:]
        for s in range(total - n):  # earliest first; s = total - n would be the suffix itself
            if toks[s: s + n] == suffix:
                start = s + n
                return toks[start: start + min(k, total - start)]
    return []


def _check(k: int, lo: int, hi: int) -> None:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k={k!r} must be an integer >= 1 (vLLM num_speculative_tokens)")
    if not isinstance(lo, int) or lo < 1:
        raise ValueError(f"prompt_lookup_min={lo!r} must be an integer >= 1 (vLLM's default is 5)")
    if not isinstance(hi, int) or hi < lo:
        raise ValueError(f"prompt_lookup_max={hi!r} must be an integer >= prompt_lookup_min={lo} "
                         "(vLLM raises the same)")


@dataclass(frozen=True)
class NgramProposer:
    """The n-gram draft kind (``make_draft(target, "ngram")`` or ``"ngram-MIN-MAX"``).

    Field names are vLLM's ``SpeculativeConfig`` fields; ``k`` comes from the :class:`SpecConfig` of
    each run (vLLM ``num_speculative_tokens``)."""

    prompt_lookup_min: int = DEFAULT_LOOKUP  # shortest suffix n-gram that may match
    prompt_lookup_max: int = DEFAULT_LOOKUP  # longest suffix n-gram tried (first)
    max_model_len: int | None = None  # vLLM proposes nothing past it; None: no limit

    def __post_init__(self):
        _check(1, self.prompt_lookup_min, self.prompt_lookup_max)

    def propose(self, context: Sequence[int], k: int) -> list[int]:
        """:func:`ngram_propose` with this proposer's settings."""
        return ngram_propose(context, k, self.prompt_lookup_min, self.prompt_lookup_max, self.max_model_len)

    def speculative_config(self, k: int) -> dict:
        """The ``vllm.LLM(speculative_config=...)`` dict of this draft with ``k`` tokens."""
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": self.prompt_lookup_min,
                "prompt_lookup_max": self.prompt_lookup_max}


def one_hot_probs(tokens: list[int], vocab_size: int, device) -> torch.Tensor:
    """``[m, V]`` float32 rows with 1 at each token: the q of a draft that proposes tokens, not
    distributions (vLLM's ``draft_probs=None``)."""
    q = torch.zeros(len(tokens), vocab_size, dtype=torch.float32, device=device)
    q[torch.arange(len(tokens)), torch.tensor(tokens, device=device)] = 1.0
    return q


def proposer_generate(target, proposer, prompt_ids, config: SpecConfig, *, generator=None,
                      stop_token_ids=(), clock=time.perf_counter) -> GenerationResult:
    """Speculative decoding with a token proposer (``proposer.propose(context, k) -> list[int]``) on vLLM's
    schedule (module docstring): the prefill emits token 1; each later step proposes m <= k tokens from
    the whole sequence, the target scores ``[last, x_1..x_m]`` in one forward ([m + 1, V] logits),
    :func:`rejection_sample` with one-hot q accepts n <= m and emits one more; m = 0 is a plain step.

    ``target``: a :class:`workbench.engine.api.Runner` (or a module, wrapped in ``HFRunner``);
    ``prompt_ids``: ``[T]`` int64. Counters (``stats``) count only steps that carried drafts, every
    draft counted even where ``max_new_tokens`` cuts the emitted tokens (vLLM counts the verify output
    before its stop check). Raises ``ValueError`` as :func:`speculative_generate` does.
    """
    from workbench.engine.hf_runner import HFRunner  # (not generate.as_runner: generate imports this module)

    cfg, runner = config, target if not isinstance(target, torch.nn.Module) else HFRunner(target)
    prompt, stop = [int(t) for t in torch.as_tensor(prompt_ids).reshape(-1).tolist()], set(stop_token_ids)
    if not prompt:
        raise ValueError("prompt_ids is empty; pass at least one token (e.g. the BOS token)")
    seq, stats = list(prompt), SpecDecodingStats()
    runner.reset()
    t0 = clock()
    logits = runner.extend(torch.tensor(prompt))[-1:]  # [1, V]: the prefill step
    runner.synchronize()
    prefill_s = clock() - t0
    gen = make_generator(generator, cfg.seed, logits.device)
    t_start, step_times = clock(), []
    seq.append(int(sample(probs_from_logits(logits[0], cfg.temperature, cfg.top_p), gen)))
    while len(seq) - len(prompt) < cfg.max_new_tokens and seq[-1] not in stop:
        t0 = clock()
        drafts = proposer.propose(seq, cfg.k)
        draft_s = clock() - t0
        m = len(drafts)
        t0 = clock()
        p_logits = runner.extend(torch.tensor(seq[runner.length:] + drafts))[-(m + 1):]  # [m+1, V]
        ps = probs_from_logits(p_logits, cfg.temperature, cfg.top_p)
        if m:
            out, n_acc = rejection_sample(torch.tensor([drafts], device=ps.device),
                                          one_hot_probs(drafts, ps.shape[-1], ps.device)[None], ps[None], gen)
            n, emitted = int(n_acc[0]), out[0, : int(n_acc[0]) + 1].tolist()
        else:
            n, emitted = 0, [int(sample(ps[0], gen))]
        runner.synchronize()
        target_s = clock() - t0
        emitted = emitted[: cfg.max_new_tokens - (len(seq) - len(prompt))]
        cut = next((i for i, t in enumerate(emitted) if t in stop), None)
        seq += emitted if cut is None else emitted[: cut + 1]
        runner.truncate(len(seq) - 1)  # KV rollback: committed tokens minus the newest one
        if m:
            stats.observe(m, n, draft_s, target_s)
        step_times.append(draft_s + target_s)
    return GenerationResult(seq[len(prompt):], prefill_s, clock() - t_start, step_times, stats=stats,
                            loop="proposer")


__all__ = ["DEFAULT_LOOKUP", "NgramProposer", "ngram_propose", "one_hot_probs", "proposer_generate"]


def greedy_proposer_counts(prompt_ids, tokens, proposer, k: int, max_new_tokens: int | None = None
                           ) -> SpecDecodingStats:
    """The counters a greedy (temperature 0) run on vLLM's schedule must report, from its output alone.

    At temperature 0 a proposer's drafts and the target's verdicts are functions of the greedy tokens:
    after the first token, each step drafts ``d = proposer.propose(prompt + tokens[:j], k)``, accepts the
    longest prefix of ``d`` equal to ``tokens[j:]`` and emits one more, so ``j`` advances by accepted + 1;
    steps run while ``j < max_new_tokens``. vLLM verifies (and counts) a step's whole draft even where
    ``max_tokens`` then cuts the output (``v1/core/sched/scheduler.py``, ``update_from_output`` counts
    ``len(generated_token_ids) - 1`` before the stop check), so ``tokens`` must run at least ``k`` past
    ``max_new_tokens`` (decode the target that much further); ``max_new_tokens=None``: ``len(tokens)``,
    the last step compared with the tokens that exist.

    ``prompt_ids``, ``tokens``: lists of int. Returns a :class:`SpecDecodingStats` (``num_drafts``,
    ``num_draft_tokens``, ``num_accepted_tokens``, ``num_accepted_tokens_per_pos`` as vLLM's counters).
    Raises ``ValueError`` for an empty ``tokens`` or one shorter than ``max_new_tokens + k``.
    """
    prompt, toks, stats, j = list(prompt_ids), list(tokens), SpecDecodingStats(), 1
    end = len(toks) if max_new_tokens is None else max_new_tokens
    if not toks or (max_new_tokens is not None and len(toks) < max_new_tokens + k):
        raise ValueError(f"tokens has {len(toks)} ids; pass the greedy continuation to at least "
                         f"max_new_tokens + k = {(max_new_tokens or 0) + k} (the last step's drafts are checked "
                         "against tokens past the budget)")
    while j < end:
        drafts = proposer.propose(prompt + toks[:j], k)
        n = 0
        while n < len(drafts) and j + n < len(toks) and drafts[n] == toks[j + n]:
            n += 1
        if drafts:
            stats.observe(len(drafts), n)
        j += n + 1
    return stats


__all__ += ["greedy_proposer_counts"]
