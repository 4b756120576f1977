"""Decode ms per step of the workbench engine, per weight format and batch, with the route table: one JSON.

    python -m benchmarks.engine_table --model smollm2-135m --device cpu --threads 1 \
        --impls fp32,bf16,w8a16,w4a16 --batches 1 --out benchmarks/results/2026-12-06_cpu_decode
    python -m benchmarks.engine_table --model random:qwen2-7b --device cuda --impls bf16,w4a16 \
        --batches 1,2,4,8,16,32,64 --out $OUT

``--model``: the built-in model (real weights; quantized by :func:`workbench.quant.quantize`, RTN, then built with
:func:`workbench.quant.convert_for_runtime`) or ``random:<shape>`` (random weights, speed only: bf16 through
``Engine.from_config``, W4A16 RTN g128 drawn layer by layer on the device). Impls: ``fp32`` / ``bf16`` (dense),
``w8a16`` (RTN INT8 per channel, symmetric), ``w4a16`` (RTN INT4, ``--group-size`` 128; bf16 activations). Each point: a prompt of
``--context`` tokens per slot, ``--warmup`` decode steps, then ``--steps`` timed steps of ``batch`` rows (wall clock,
after a device synchronize), ms per step as median with p10 / p90 (the noise); ``floor_ms`` is the weight bytes one
step reads (``Engine.weight_bytes``) over the read bandwidth measured here (CPU: a one-pass ``sum`` of 512 MB on
the same threads; CUDA: :func:`workbench.kernels.bandwidth.measure_read_bw`). The JSON records date (UTC), device,
git commit, the command, versions, the ``EngineConfig`` and each engine's ``route_key`` and route table
(at every timed batch and a 512-token prefill, before and after the timings; each row's ``kernels``: the kernels its
step ran).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

IMPLS = ("fp32", "bf16", "w8a16", "w4a16")


def _git() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, check=True).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + f" ({torch.backends.cpu.get_cpu_capability()})"
    except OSError:
        pass
    return platform.processor() or "cpu"


def read_bandwidth(device: torch.device) -> dict:
    """Bytes per second one pass over a large tensor reads (CPU: ``x.sum()`` of 512 MB float32, best of 5; CUDA:
    :func:`workbench.kernels.bandwidth.measure_read_bw`)."""
    if device.type == "cuda":
        from workbench.kernels.bandwidth import measure_read_bw

        rd = measure_read_bw()
        return {"bw_Bps": rd["read_bw_Bps"], "bw_source": f"read ({rd['read_bw_probe']})"}
    x = torch.ones(2**27)
    best = min(_wall(lambda: x.sum(), device) for _ in range(5))
    return {"bw_Bps": x.numel() * 4 / best, "bw_source": "torch.sum over 512 MB float32"}


def _wall(fn, device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - t0


def build_engine(model: str, impl: str, device: torch.device, max_batch: int, max_seq: int, config,
                 group_size: int = 128):
    """The engine for ``impl`` of ``model`` (see the module docstring); ``group_size``: the W4A16 group."""
    from workbench.engine import Engine

    if model.startswith("random:"):
        from workbench.models.random_init import hf_config

        if impl not in ("bf16", "w4a16", "fp32"):
            raise ValueError(f"--impls {impl} takes a real model (quantize); random shapes take fp32, bf16, w4a16")
        dtype = torch.float32 if impl == "fp32" else torch.bfloat16
        return Engine.from_config(hf_config(model.split(":", 1)[1]), max_batch=max_batch, max_seq=max_seq,
                                  dtype=dtype, device=device, w4a16=impl == "w4a16", group_size=group_size,
                                  config=config)
    from workbench.models import load_model
    from workbench.quant import QuantConfig, convert_for_runtime, quantize

    m, _ = load_model(model, dtype="float32", device="cpu")
    if impl in ("w8a16", "w4a16"):
        qc = (QuantConfig.from_name("rtn_int8_channel_sym") if impl == "w8a16" else
              QuantConfig.from_name("rtn_int4_g128", group_size=group_size, partial_groups=True))
        m, _ = quantize(m, qc)
    m = m.to(device)
    dtype = torch.float32 if impl == "fp32" else torch.bfloat16
    return convert_for_runtime(m, max_batch=max_batch, max_seq=max_seq, dtype=dtype, device=device, config=config)


def time_decode(eng, batch: int, context: int, warmup: int, steps: int) -> dict:
    """ms per decode step of ``batch`` rows after a ``context``-token prompt in each slot."""
    dev = eng.device
    gen = torch.Generator().manual_seed(0)
    eng.reset()
    slots = list(range(batch))
    eng.extend_batch(slots, torch.randint(0, eng.vocab_size, (batch, context), generator=gen), logits="last")
    tok = torch.randint(0, eng.vocab_size, (batch, 1), generator=gen).to(dev)
    times = []
    for i in range(warmup + steps):
        dt = _wall(lambda: eng.extend_batch(slots, tok), dev)
        if i >= warmup:
            times.append(dt * 1e3)
    q = statistics.quantiles(times, n=10)
    return {"batch": batch, "ms": statistics.median(times), "p10_ms": q[0], "p90_ms": q[-1], "steps": steps}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--impls", default="bf16,w4a16")
    ap.add_argument("--batches", default="1")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--group-size", type=int, default=128, help="W4A16 group size (RTN; default 128)")
    ap.add_argument("--pdl", choices=("on", "off"), default="on",
                    help="EngineConfig.pdl: programmatic dependent launch of the CUDA kernels (off: an A/B)")
    ap.add_argument("--out", default=None, help="folder for engine_table.json (default: print only)")
    a = ap.parse_args(argv)
    from workbench.engine import EngineConfig
    from workbench.kernels.timing import tuned_configs

    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    impls = [i.strip() for i in a.impls.split(",") if i.strip()]
    bad = [i for i in impls if i not in IMPLS]
    if bad:
        raise SystemExit(f"--impls {bad} unknown; use some of {IMPLS}")
    batches = [int(b) for b in a.batches.split(",")]
    config = EngineConfig.from_env(pdl=a.pdl == "on")
    import transformers

    out = {"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "device": _device_name(device), "git_commit": _git(),
           "command": "python -m benchmarks.engine_table " + " ".join(sys.argv[1:] if argv is None else argv),
           "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
           "threads": torch.get_num_threads(), "model": a.model, "engine_config": config.to_dict(),
           "floor": read_bandwidth(device), "rows": [], "routes": {}}
    for impl in impls:
        t0 = time.perf_counter()
        eng = build_engine(a.model, impl, device, max(batches), a.context + a.warmup + a.steps + 1, config,
                           a.group_size)
        build_s = time.perf_counter() - t0
        rows = sorted(set(batches) | {512})
        out["routes"][impl] = {"route_key": eng.route_key(rows),
                               "route_table": eng.route_table(rows).to_dict("records")}
        for b in batches:
            timed = time_decode(eng, b, a.context, a.warmup, a.steps)
            # the kernels this batch's step ran (after its timing: kernels routed by a measurement show the outcome)
            kernels = "+".join(sorted(set(eng.route_table([b])["kernel"])))
            r = {"impl": impl, "build_s": build_s, "route_key": eng.route_key(rows), "kernels": kernels, **timed}
            r["floor_ms"] = eng.weight_bytes() / out["floor"]["bw_Bps"] * 1e3
            out["rows"].append(r)
            print(json.dumps(r), flush=True)
        # route table again after the timings, for the kernels chosen by a measurement at each batch
        out["routes"][impl]["route_table_after"] = eng.route_table(rows).to_dict("records")
        if device.type == "cuda":
            out["routes"][impl]["tuned"] = tuned_configs()
        del eng
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if a.out:
        Path(a.out).mkdir(parents=True, exist_ok=True)
        (Path(a.out) / "engine_table.json").write_text(json.dumps(out, indent=1, default=str))
    return out


if __name__ == "__main__":
    main()
