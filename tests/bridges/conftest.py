"""Fixtures for the bridge tests: vLLM's source for the pinned release, and sample files in vLLM's
format written by vLLM's own functions, executed from that source.

vLLM cannot be imported here (it pins another torch), so :class:`VllmCode` compiles only the
self-contained functions that write each field: ``calculate_metrics`` and the ``BenchmarkMetrics`` /
``RequestFuncOutput`` dataclasses, the ``result = {...}`` literal, the nested ``process_one_metric``,
the speculative-decoding blocks of ``benchmark()`` and the setup block of ``main_async``
(``vllm/benchmarks/serve.py``); ``SpecDecodingStats`` and ``SpecDecodingProm``
(``vllm/v1/spec_decode/metrics.py``) with ``create_metric_per_engine`` (``vllm/v1/metrics/utils.py``)
for the Prometheus text; ``fetch_spec_decode_metrics`` as vLLM's own reader of that text.
"""

from __future__ import annotations

import ast
import asyncio
import functools
import json
import sys
import types

import numpy as np
import pytest

from workbench.bridges.vllm_source import VLLM_VERSION, VllmSource, VllmSourceUnavailable

SERVE = "vllm/benchmarks/serve.py"


@pytest.fixture(scope="session")
def vllm_src() -> VllmSource:
    try:
        return VllmSource.fetch(VLLM_VERSION)
    except VllmSourceUnavailable as e:
        pytest.skip(f"vLLM {VLLM_VERSION}'s source is not available (PyPI unreachable?): {e}")


def _segment(src: VllmSource, rel: str, name: str, owner: str | None = None) -> str:
    text = src.path(rel).read_text()
    body = src.tree(rel).body
    if owner:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == owner).body
    node = next(n for n in body if getattr(n, "name", None) == name or (
        isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == name))
    seg = ast.get_source_segment(text, node)
    decos = "".join(f"@{ast.get_source_segment(text, d)}\n" for d in getattr(node, "decorator_list", []))
    return decos + seg


def _find(tree: ast.AST, pred):
    return next(n for n in ast.walk(tree) if pred(n))


class VllmCode:
    """vLLM's own result-writing functions, compiled from the pinned release's source."""

    def __init__(self, src: VllmSource):
        self.src = src
        header = ("from __future__ import annotations\nimport contextlib, math, time, warnings\n"
                  "import numpy as np\nimport aiohttp\nimport prometheus_client\n"
                  "from dataclasses import dataclass, field\nfrom typing import Any\n"
                  "TERM_PLOTLIB_AVAILABLE = False\n")
        parts = [_segment(src, "vllm/benchmarks/lib/endpoint_request_func.py", "RequestFuncOutput")]
        parts += [_segment(src, SERVE, n) for n in ("MILLISECONDS_TO_SECONDS_CONVERSION", "BenchmarkMetrics",
                                                     "SpecDecodeMetrics", "calculate_metrics",
                                                     "fetch_spec_decode_metrics", "_get_server_metrics_results")]
        parts += [_segment(src, "vllm/v1/metrics/utils.py", "create_metric_per_engine")]
        parts += [_segment(src, "vllm/v1/spec_decode/metrics.py", n) for n in ("SpecDecodingStats", "SpecDecodingProm")]
        # a registered module: dataclasses resolve string annotations through sys.modules
        mod = types.ModuleType(f"vllm_{src.version.replace('.', '_')}_code")
        mod.logger = types.SimpleNamespace(info=print)
        sys.modules[mod.__name__] = mod
        exec(compile(header + "\n\n".join(parts), f"vllm-{src.version}", "exec"), mod.__dict__)  # noqa: S102
        self.ns = mod.__dict__
        tree = src.tree(SERVE)
        self.benchmark = _find(tree, lambda n: isinstance(n, ast.AsyncFunctionDef) and n.name == "benchmark")
        self.main = _find(tree, lambda n: isinstance(n, ast.AsyncFunctionDef) and n.name == "main_async")
        self.text = src.path(SERVE).read_text()

    def _if(self, test: str, contains: str = "") -> ast.If:
        return _find(self.benchmark, lambda n: isinstance(n, ast.If) and ast.unparse(n.test).startswith(test)
                     and contains in ast.unparse(n))

    def _run(self, node: ast.AST, env: dict) -> dict:
        exec(compile(ast.Module(body=[node], type_ignores=[]), "vllm-serve", "exec"), env)  # noqa: S102
        return env

    # -- /metrics -------------------------------------------------------------------------------
    def metrics_text(self, steps, k: int, model_name: str = "target", engines: int = 1) -> str:
        """Prometheus text after ``steps`` = [(engine, num_draft_tokens, num_accepted)], as the server
        exposes it: vLLM's ``SpecDecodingStats.observe_draft`` + ``SpecDecodingProm.observe``. Each call
        is a fresh server (new counters, new ``_created`` times)."""
        return self.metrics_scrapes(steps, k, [len(steps)], model_name, engines)[0]

    def metrics_scrapes(self, steps, k: int, at, model_name: str = "target", engines: int = 1) -> list[str]:
        """The texts one server exposes when scraped after the first ``n`` steps, for each ``n`` in ``at``."""
        import prometheus_client

        reg = prometheus_client.CollectorRegistry()
        prom_cls = type("Prom", (self.ns["SpecDecodingProm"],),
                        {"_counter_cls": functools.partial(prometheus_client.Counter, registry=reg)})
        per_engine = {i: [model_name, str(i)] for i in range(engines)}
        prom = prom_cls(types.SimpleNamespace(num_speculative_tokens=k), ["model_name", "engine"], per_engine)
        texts = []
        for i in range(len(steps) + 1):
            if i in at:
                texts.append(prometheus_client.generate_latest(reg).decode())
            if i < len(steps):
                engine, drafted, accepted = steps[i]
                stats = self.ns["SpecDecodingStats"].new(k)
                stats.observe_draft(drafted, accepted)
                prom.observe(stats, engine)
        return texts

    def fetch_spec_decode_metrics(self, text: str):
        """vLLM's own reader of ``/metrics`` (``vllm bench serve``), on ``text``."""

        class Resp:
            status = 200

            async def text(self):
                return text

            async def __aenter__(self):
                return self

            async def __aexit__(self, *a):
                return False

        session = types.SimpleNamespace(get=lambda url: Resp())
        return asyncio.run(self.ns["fetch_spec_decode_metrics"]("http://x", session))

    # -- vllm bench serve --save-result ----------------------------------------------------------
    def bench_result(self, outputs: list[dict], dur_s: float, *, goodput: dict | None = None,
                     percentiles=(50.0, 90.0, 99.0), metrics_before: str | None = None,
                     metrics_after: str | None = None, save_detailed: bool = True) -> dict:
        """The dict ``vllm bench serve --save-result`` dumps, for requests ``outputs`` (kwargs of
        ``RequestFuncOutput``) over ``dur_s`` seconds, with ``--percentile-metrics ttft,tpot,itl,e2el``."""
        outs = [self.ns["RequestFuncOutput"](**o) for o in outputs]
        metrics, lens = self.ns["calculate_metrics"]([], outs, dur_s, None, list(percentiles), goodput or {})
        env = dict(self.ns, metrics=metrics, outputs=outs, benchmark_duration=dur_s, actual_output_lens=lens,
                   goodput_config_dict=goodput or {}, selected_percentile_metrics=["ttft", "tpot", "itl", "e2el"],
                   selected_percentiles=list(percentiles), print=lambda *a, **k: None)
        lit = _find(self.benchmark, lambda n: isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "result"
                    and isinstance(n.value, ast.Dict) and any(getattr(k, "value", "") == "ttfts" for k in n.value.keys))
        self._run(lit, env)
        env["result"].update(env["_get_server_metrics_results"](outs))
        if metrics_before is not None:
            env["spec_decode_metrics_before"] = self.fetch_spec_decode_metrics(metrics_before)
            env["spec_decode_metrics_after"] = self.fetch_spec_decode_metrics(metrics_after)
            env["spec_decode_stats"] = None
            self._run(self._if("spec_decode_metrics_before is not None"), env)
            self._run(self._if("spec_decode_stats is not None", "result['spec_decode_acceptance_rate']"), env)
        self._run(_find(self.benchmark, lambda n: isinstance(n, ast.FunctionDef) and n.name == "process_one_metric"), env)
        for m in ("ttft", "tpot", "itl", "e2el"):
            env["process_one_metric"](m, m.upper(), m)
        return self._main(env["result"], save_detailed)

    def _main(self, benchmark_result: dict, save_detailed: bool) -> dict:
        """``main_async``'s statements from ``result_json = {}`` to the ``--save-detailed`` pruning."""
        body = self.main.body
        start = next(i for i, n in enumerate(body) if isinstance(n, ast.AnnAssign)
                     and getattr(n.target, "id", "") == "result_json")
        merge = next(i for i, n in enumerate(body) if i > start and isinstance(n, ast.Assign)
                     and "**benchmark_result" in ast.unparse(n))
        prune = next(n for n in body if isinstance(n, ast.If) and ast.unparse(n.test) == "not args.save_detailed")
        args = types.SimpleNamespace(backend="vllm", num_prompts=12, metadata=None, request_rate=4.0,
                                     burstiness=1.0, max_concurrency=None, ramp_up_strategy=None,
                                     save_detailed=save_detailed)
        from datetime import datetime
        env = {"args": args, "label": None, "model_id": "target", "tokenizer_id": "target",
               "benchmark_result": benchmark_result, "datetime": datetime, "Any": object}
        for node in body[start:merge + 1] + [prune]:
            self._run(node, env)
        return env["result_json"]


@pytest.fixture(scope="session")
def vllm_code(vllm_src) -> VllmCode:
    return VllmCode(vllm_src)


def planted_requests(n: int = 12, seed: int = 0) -> list[dict]:
    """``RequestFuncOutput`` kwargs of ``n`` requests with known timings (s): arrivals 0.25 s apart,
    TTFT 20-220 ms, gaps 8-30 ms, 1-16 output tokens (one single-token request), one failure."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        n_out = 1 if i == 3 else int(rng.integers(2, 17))
        itl = [float(x) for x in rng.uniform(0.008, 0.030, n_out - 1)]
        ttft = float(rng.uniform(0.02, 0.22))
        ok = i != 5
        out.append({"generated_text": "x" * n_out, "success": ok, "latency": ttft + sum(itl) if ok else 0.0,
                    "output_tokens": n_out if ok else 0, "ttft": ttft if ok else 0.0, "itl": itl if ok else [],
                    "prompt_len": int(rng.integers(16, 512)), "error": "" if ok else "HTTP 500",
                    "start_time": 1000.0 + 0.25 * i})
    return out


def _planted_steps(n: int = 300, k: int = 4, alpha: float = 0.7, seed: int = 1) -> list[tuple[int, int, int]]:
    """``(engine, num_draft_tokens, num_accepted)`` per verification step: k drafts, each accepted with
    probability ``alpha`` until the first rejection (Leviathan et al.'s i.i.d. model), two engines."""
    rng = np.random.default_rng(seed)
    steps = []
    for i in range(n):
        accepted = 0
        while accepted < k and rng.random() < alpha:
            accepted += 1
        steps.append((i % 2, k, accepted))
    return steps


PLANTED_STEPS = _planted_steps()


@pytest.fixture(scope="session")
def bh():
    """This module's helpers (``planted_requests``, ``PLANTED_STEPS``, ``VllmCode``): test modules
    cannot import siblings under importlib mode."""
    return sys.modules[__name__]


def samples(code: VllmCode) -> dict[str, str]:
    """The committed sample files (``data/vllm-<version>_*``): /metrics scraped after 100 and after all
    300 planted steps, and the bench JSON of the planted requests with the spec-decoding window."""
    before, after = code.metrics_scrapes(PLANTED_STEPS, k=4, at=(100, len(PLANTED_STEPS)), engines=2)
    bench = code.bench_result(planted_requests(), 3.3, goodput={"ttft": 150.0, "tpot": 25.0},
                              metrics_before=before, metrics_after=after)
    v = code.src.version
    return {f"vllm-{v}_metrics_before.txt": before, f"vllm-{v}_metrics_after.txt": after,
            f"vllm-{v}_bench_serve.json": json.dumps(bench)}


def tiny_llama(seed: int = 0, hidden: int = 128, inter: int = 256, layers: int = 2, heads: int = 4, kv: int = 2):
    """A random Llama (vocab 256) with a few salient input channels, as trained LLMs have (AWQ sec. 3.1)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=256, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=256)
    m = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for layer in m.model.layers:
            layer.input_layernorm.weight[:4] *= 8
            layer.post_attention_layernorm.weight[:4] *= 8
    return m


def calib_ids(n: int = 8, t: int = 64, seed: int = 1):
    import torch

    return torch.randint(0, 256, (n, t), generator=torch.Generator().manual_seed(seed))
