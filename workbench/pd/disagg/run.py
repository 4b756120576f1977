"""Run a disaggregated deployment for real in two processes, gather its per-request records, and set the
simulator up for the same deployment, costs and link.

    run = run_disagg([workload], DisaggConfig(model=cfg, profile=ProfileConfig(...)))
    cost = CostModel.fit(run.profile)
    compare = compare_runs(run, cost, config)  # real vs simulated TTFT, TPOT, E2E per run
    transfers = transfer_check(run)  # measured transfer time vs latency + bytes / bandwidth
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.multiprocessing as mp

from workbench.pd.costmodel import CostModel
from workbench.pd.disagg.config import NCCL_ENV, DisaggConfig
from workbench.pd.disagg.link import link_fit
from workbench.pd.disagg.workers import worker
from workbench.pd.loop import compare_to_sim
from workbench.pd.metrics import RequestStats
from workbench.pd.sim import SimConfig, Workload

__all__ = ["DisaggRun", "compare_runs", "describe_link", "first_token_agreement", "run_disagg", "sim_config_for",
           "transfer_check"]

TIME_COLS = ("prefill_start_s", "prefill_end_s", "transfer_start_s", "transfer_end_s", "admit_s")


@dataclass
class DisaggRun:
    """What :func:`run_disagg` measured.

    ``requests``: one row per request and run, with the columns of :class:`workbench.pd.metrics.
    RequestStats` (``ttft_ms`` = arrival -> first token emitted by the decode worker, ``tpot_ms``,
    ``e2e_ms``, ``itl_ms``, ``finish_s``, ...) plus ``run`` (index of the workload), the timestamps
    ``prefill_start_s``, ``prefill_end_s``, ``transfer_start_s``, ``send_end_s`` (the sender's side done),
    ``transfer_end_s``, ``admit_s`` and ``token_s`` (list; every token), all in s from the run's start
    (request 0 arrives at 0), ``tokens``
    (generated ids), ``prefill_token`` (the prefill worker's token, which the client never sees),
    ``transfer_bytes`` and ``transfer_ms``.
    ``link``: ``backend``, ``devices``, ``description``, ``latency_ms``, ``gbs`` (GB/s) and the probe's
    ``sizes`` (:func:`workbench.pd.disagg.link.link_fit`), ``env`` (each worker's :data:`NCCL_ENV` values). ``profile``: the step-time profile (prefill rows
    from rank 0, decode rows from rank 1) or None. ``kv``: with ``record_kv``, ``(run, req_id) ->
    (sent, received)`` caches ``[2, n_layers, n_kv_heads, prompt_len, head_dim]`` on the CPU.
    ``workloads``: the workloads served, in ``run`` order.
    """

    requests: pd.DataFrame
    link: dict
    profile: pd.DataFrame | None
    kv_bytes_per_token: int
    workloads: list
    kv: dict | None = None


@contextmanager
def _env(values: dict):
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_disagg(workloads: Workload | list[Workload] | Callable[[pd.DataFrame], list[Workload]],
               config: DisaggConfig) -> DisaggRun:
    """Serve each workload in turn (in wall-clock time, one after the other) with one prefill process
    and one decode process (``torch.multiprocessing`` spawn; :mod:`workbench.pd.disagg.workers`), after
    an optional profile (``config.profile``) and a link probe.

    ``workloads``: one, a list, or a picklable function (module level) of the measured profile
    (:func:`workbench.pd.profile.run_profile` rows) returning the list, for loads relative to the
    capacity measured in the same run; it needs ``config.profile``. Both processes start with
    :data:`NCCL_ENV` in their environment. Raises ``ValueError`` when a request needs more than
    ``config.max_seq`` positions, and ``torch.multiprocessing.ProcessRaisedException`` when a worker
    fails (the other is terminated)."""
    if callable(workloads):
        if config.profile is None:
            raise ValueError("workloads computed from the profile need DisaggConfig.profile; set it or pass "
                             "the workloads themselves")
    else:
        workloads = [workloads] if isinstance(workloads, Workload) else list(workloads)
        if not workloads:
            raise ValueError("run_disagg needs at least one workload")
        need = max(int((w.prompt_len + w.output_len).max()) for w in workloads)
        if need > config.max_seq:
            raise ValueError(f"a request needs {need} KV positions > DisaggConfig.max_seq={config.max_seq}; "
                             "raise it")
    with tempfile.TemporaryDirectory(prefix="disagg-") as d, _env(NCCL_ENV):
        mp.spawn(worker, args=(config, workloads, d), nprocs=2, join=True)
        r0, r1 = (torch.load(Path(d) / f"rank{r}.pt", weights_only=False) for r in (0, 1))
    return _assemble(r0, r1, r0["workloads"], config.record_kv)


def describe_link(backend: str, devices: list[str]) -> str:
    """In words: which path the KV cache took between the two ranks."""
    if backend == "nccl":
        return f"NCCL send/recv {devices[0]} -> {devices[1]} (device to device)"
    if devices[0].startswith("cuda"):
        return (f"gloo send/recv through pinned host memory, both ranks on {devices[0]} (device-local "
                "deployment: NCCL refuses two ranks on one GPU; this is not an NVLink measurement)")
    return "gloo send/recv between two CPU processes"


def _assemble(r0: dict, r1: dict, workloads: list, record_kv: bool) -> DisaggRun:
    frames, kv = [], {} if record_kv else None
    bpt = int(r1["kv_bytes_per_token"])
    for i, (wl, pre, dec) in enumerate(zip(workloads, r0["runs"], r1["runs"])):
        t0 = pre["t0"]
        stats, extra = RequestStats(), []
        for r in range(len(wl)):
            d = dec[r]
            stats.observe(r, pre["arrival"][r] - t0, [t - t0 for t in d["token_t"]], int(wl.prompt_len[r]))
            extra.append({"prefill_start_s": pre["prefill_start"][r] - t0, "prefill_end_s": pre["prefill_end"][r] - t0,
                          "transfer_start_s": pre["transfer_start"][r] - t0, "send_end_s": pre["send_end"][r] - t0,
                          "transfer_end_s": d["transfer_end"] - t0,
                          "admit_s": d["admit"] - t0, "token_s": [t - t0 for t in d["token_t"]],
                          "tokens": d["tokens"], "prefill_token": pre["prefill_token"][r],
                          "prefill_token_hdr": d["prefill_token_hdr"]})
            if kv is not None:
                kv[(i, r)] = (pre["sent_kv"][r], d["received_kv"])
        df = pd.concat([stats.to_frame(), pd.DataFrame(extra)], axis=1)
        df.insert(0, "run", i)
        frames.append(df)
    req = pd.concat(frames, ignore_index=True)
    req["transfer_bytes"] = req["prompt_len"] * bpt
    req["transfer_ms"] = (req["transfer_end_s"] - req["transfer_start_s"]) * 1e3
    devices = [r0["device"], r1["device"]]
    link = {"backend": r0["backend"], "devices": devices, "device_names": [r0["device_name"], r1["device_name"]],
            "description": describe_link(r0["backend"], devices), "dtype": r0["dtype"], "env": [r0["env"], r1["env"]]}
    link |= link_fit(r0["probe"], r1["probe"])
    prof = None
    if r0["profile"] is not None and r1["profile"] is not None:
        prof = pd.DataFrame(r0["profile"] + r1["profile"])
    return DisaggRun(req, link, prof, bpt, workloads, kv)


def sim_config_for(run: DisaggRun, config: DisaggConfig) -> SimConfig:
    """The simulator's deployment of ``run``: disaggregated, one prefill and one decode instance,
    ``max_batch`` = decode slots, the prefill step limits of ``config``, KV capacity ``decode_slots *
    max_seq`` (one slot per request: never binding), and the KV bytes per token, link bandwidth and
    latency that ``run`` measured. Raises ValueError when the probe gave no bandwidth (NaN)."""
    if not np.isfinite(run.link["gbs"]):
        raise ValueError("the link probe measured no bandwidth (link['gbs'] is NaN); rerun with a larger "
                         "DisaggConfig.probe_tokens")
    return SimConfig(policy="disaggregated", n_prefill=1, n_decode=1, max_batch=config.decode_slots,
                     max_prefill_batch=config.max_prefill_batch, max_prefill_tokens=config.max_prefill_tokens,
                     kv_capacity_tokens=config.decode_slots * config.max_seq,
                     kv_bytes_per_token=float(run.kv_bytes_per_token), link_gbs=float(run.link["gbs"]),
                     link_latency_ms=float(run.link["latency_ms"]))


def compare_runs(run: DisaggRun, cost: CostModel, config: DisaggConfig) -> pd.DataFrame:
    """:func:`workbench.pd.loop.compare_to_sim` for every run (``run`` column added): mean and p50/p90/p99
    of TTFT, TPOT and E2E, real vs simulated under :func:`sim_config_for` with ``cost``."""
    sim_cfg = sim_config_for(run, config)
    out = []
    for i, wl in enumerate(run.workloads):
        real = run.requests[run.requests["run"] == i].drop(columns=["run"]).reset_index(drop=True)
        c = compare_to_sim(real, wl, cost, sim_cfg)
        c.insert(0, "run", i)
        out.append(c)
    return pd.concat(out, ignore_index=True)


def transfer_check(run: DisaggRun) -> pd.DataFrame:
    """Per request: measured ``transfer_ms`` (send start on rank 0 -> payload received on rank 1) vs
    ``model_ms`` = ``latency_ms + bytes / gbs`` from the link probe (``SimConfig.transfer_ms``), and
    ``err_pct = 100 (model - measured) / measured``."""
    df = run.requests[["run", "req_id", "prompt_len", "transfer_bytes", "transfer_ms"]].copy()
    df["model_ms"] = run.link["latency_ms"] + df["transfer_bytes"] / (run.link["gbs"] * 1e6)
    df["err_pct"] = 100 * (df["model_ms"] / df["transfer_ms"] - 1)
    return df


def first_token_agreement(run: DisaggRun) -> float:
    """Fraction of requests whose first token (decode worker, after the transfer) equals the prefill
    worker's token: 1 when the transferred KV cache is the prefill's (up to near-ties in low precision)."""
    first = np.array([t[0] for t in run.requests["tokens"]])
    return float(np.mean(first == run.requests["prefill_token"].to_numpy()))
