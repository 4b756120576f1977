"""lm-eval's tokenization of MMLU requests, batched.

lm-eval (``TemplateLM._encode_pair``, HF backend ``tok_encode`` with the tokenizer's default special
tokens) scores the pair ``(context, continuation)`` as::

    ctx   = encode(context)
    whole = encode(context + continuation)
    cont  = whole[len(ctx):]          # the model sees ctx + cont

:func:`encode_pairs_reference` does exactly that, one full encode per pair. For 14,042 5-shot
questions that is 70,210 encodes of ~600 tokens each, and a byte-level BPE tokenizer spends its time
pre-tokenizing the same few-shot prefix over and over. :func:`tokenize_mmlu` encodes each part once:

* the context ``H + Q`` (H the subject's prefix, Q the question) is ``encode(H[:cut]) +
  encode_without_specials(H[cut:] + Q)``, with ``cut`` where the whitespace before the last
  exemplar's ``"Answer:"`` line starts. A fixed line follows the cut in every context of the subject, so a
  pre-tokenizer whose splits depend on a bounded neighbourhood (regex-based byte-level BPE: GPT-2,
  Llama 3, Qwen2, SmolLM2) splits there identically for every question;
* a continuation ``C`` after a context ending in ``"Answer:"`` is ``encode_ns("Answer:" + C)
  [len(encode_ns("Answer:")):]``, lm-eval's slice taken on the context's fixed last line.

Both are checked against :func:`encode_pairs_reference` on one question per subject (every
continuation); a subject that differs is encoded with the reference instead, so a tokenizer for which
the split is not exact (a SentencePiece ``Metaspace``, a BOS rule) is still scored on lm-eval's tokens.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

__all__ = ["MMLURequests", "encode_pairs_reference", "tokenize_mmlu"]

ANCHOR = "Answer:"  # every MMLU context of both formulations ends with this line


@dataclass
class MMLURequests:
    """Token ids of every (context, continuation) pair, with each subject's shared token prefix apart.

    ``prefix_ids[subject_idx[i]] + ctx_ids[i]`` is question i's context exactly as lm-eval encodes
    it, ``cont_ids[i][c]`` choice c's continuation tokens (at least one each).
    """

    subjects: list  # sorted subject names
    prefix_ids: list  # per subject: token ids shared by all its contexts (empty without prefix reuse)
    subject_idx: np.ndarray  # [n] int64, index into ``subjects``
    ctx_ids: list  # [n] context ids after the shared prefix (at least one token each)
    cont_ids: list  # [n][n_choices] continuation ids
    choice_chars: np.ndarray  # [n, n_choices] float64: len(choice) in characters (acc_norm's divisor)
    method: list  # per subject: "split" or "reference" (how its contexts were encoded)

    def __len__(self) -> int:
        return len(self.ctx_ids)

    @property
    def n_context(self) -> np.ndarray:
        """[n] context length in tokens (shared prefix included)."""
        p = np.array([len(x) for x in self.prefix_ids], dtype=np.int64)
        return p[self.subject_idx] + np.array([len(c) for c in self.ctx_ids], dtype=np.int64)


def _encoder(tok):
    """``encode(strings, specials) -> list of id lists``, batched when the tokenizer is fast."""
    def enc(strings: list[str], specials: bool = True) -> list[list[int]]:
        if not strings:
            return []
        if getattr(tok, "is_fast", False):
            return [list(x) for x in tok(list(strings), add_special_tokens=specials)["input_ids"]]
        return [list(tok.encode(s, add_special_tokens=specials)) for s in strings]
    return enc


def encode_pairs_reference(tok, contexts: list[str], continuations: list[list[str]]):
    """lm-eval's ``_encode_pair`` for each context and each of its continuations (trailing spaces of
    the context move to the continuation, as there). Returns ``(ctx_ids, cont_ids)``."""
    enc = _encoder(tok)
    ctx, flat = [], []
    for c, conts in zip(contexts, continuations):
        n_sp = len(c) - len(c.rstrip())
        ctx.append(c[:len(c) - n_sp])
        flat += [c + k for k in conts]  # context[:-n] + (context[-n:] + continuation)
    ctx_ids, whole = enc(ctx), enc(flat)
    out, j = [], 0
    for ids, conts in zip(ctx_ids, continuations):
        out.append([whole[j + k][len(ids):] for k in range(len(conts))])
        j += len(conts)
    return ctx_ids, out


def _split_subject(enc, prefix: str, texts: list[str], conts: list[list[str]], cont_cache: dict):
    """Contexts and continuations of one subject by the split encoding (module docstring)."""
    cut = max(prefix.rfind("\n" + ANCHOR), 0)  # 0 when the prefix has no exemplar: encode it whole
    while cut and prefix[cut - 1].isspace():  # cut where a whitespace run starts: a pre-tokenizer
        cut -= 1  # splits a run by what follows it ("x \nAnswer" is "x", " ", "\n", "Answer" in GPT-2's)
    head = enc([prefix[:cut]])[0] if cut else []
    tails = enc([prefix[cut:] + t for t in texts], specials=not cut)
    ctx = [head + t for t in tails]
    new = sorted({k for ks in conts for k in ks} - cont_cache.keys())
    if new:
        anchor = enc([ANCHOR], specials=False)[0]
        for k, ids in zip(new, enc([ANCHOR + k for k in new], specials=False)):
            cont_cache[k] = ids[len(anchor):]
    return ctx, [[cont_cache[k] for k in ks] for ks in conts]


def _common_prefix_len(seqs: list[list[int]]) -> int:
    return len(os.path.commonprefix(seqs)) if seqs else 0


def tokenize_mmlu(tok, prefixes: dict, subjects: list[str], texts: list[str], choices: list[list[str]], *,
                  reuse_prefix: bool = True, method: str = "split") -> MMLURequests:
    """Token ids of MMLU requests as lm-eval builds them (``context = prefixes[subject] + text``,
    continuations ``" " + choice``), grouped by subject.

    Args:
        tok: an HF tokenizer.
        prefixes: subject -> description and exemplars (:func:`workbench.eval.mmlu.subject_prefix`).
        subjects, texts, choices: per question, its subject, ``doc_to_text`` and ``doc_to_choice``.
        reuse_prefix: compute each subject's longest common token prefix (capped so every context
            keeps at least one own token); False leaves it empty.
        method: ``"split"`` (fast, checked per subject, module docstring) or ``"reference"``.

    Raises:
        ValueError: an unknown method; a text not ending in ``"Answer:"`` with ``method="split"``; a
            continuation of zero tokens.
    """
    if method not in ("split", "reference"):
        raise ValueError(f"method={method!r}; use 'split' or 'reference'")
    enc = _encoder(tok)
    names = sorted(set(subjects))
    pos = {s: i for i, s in enumerate(names)}
    s_idx = np.array([pos[s] for s in subjects], dtype=np.int64)
    conts = [[" " + c for c in cs] for cs in choices]
    ctx_ids, cont_ids = [None] * len(texts), [None] * len(texts)
    prefix_ids, how, cache = [], [], {}
    for si, s in enumerate(names):
        idx = np.flatnonzero(s_idx == si)
        s_texts, s_conts = [texts[i] for i in idx], [conts[i] for i in idx]
        used = "reference"
        if method == "split" and all(t.endswith(ANCHOR) for t in s_texts):
            c, k = _split_subject(enc, prefixes[s], s_texts, s_conts, cache)
            rc, rk = encode_pairs_reference(tok, [prefixes[s] + s_texts[0]], [s_conts[0]])
            if c[0] == rc[0] and k[0] == rk[0]:
                used = "split"
        if used == "reference":
            c, k = encode_pairs_reference(tok, [prefixes[s] + t for t in s_texts], s_conts)
        shared = 0
        if reuse_prefix:
            shared = min(_common_prefix_len(c), min(len(x) for x in c) - 1)
        prefix_ids.append(c[0][:shared])
        how.append(used)
        for j, i in enumerate(idx):
            ctx_ids[i], cont_ids[i] = c[j][shared:], k[j]
            if any(len(x) == 0 for x in k[j]):
                raise ValueError(f"question {i} ({s}): a continuation encodes to zero tokens; lm-eval cannot score it")
    chars = np.array([[len(c) for c in cs] for cs in choices], dtype=np.float64)
    return MMLURequests(names, prefix_ids, s_idx, ctx_ids, cont_ids, chars, how)
