"""The two processes of a disaggregated deployment: a prefill worker (rank 0) and a decode worker (rank 1).

Request path (that of vLLM's P/D proxies with ``P2pNcclConnector``, as
:mod:`workbench.pd.sim.policies.disaggregated` simulates it):

1. **prefill** (rank 0): requests arrive in wall-clock time (``t0 + arrival_s``); FCFS prefill steps of up
   to ``max_prefill_batch`` prompts and ``max_prefill_tokens`` tokens (the head always runs) compute the
   prompt's KV cache and one token that the client never sees (it travels in the header as a check);
2. **KV transfer**: the prompt's keys and values (every layer, ``prompt`` positions) are copied out of the
   slot (:meth:`~workbench.engine.Engine.read_slot_kv`) and queued on the send thread, one transfer at a
   time (:mod:`workbench.pd.disagg.link`);
3. **decode** (rank 1): a received request waits for a free slot (FCFS, in arrival order), is written into
   it (:meth:`~workbench.engine.Engine.write_slot_kv`) with ``prompt - 1`` positions kept, and joins the
   running batch at a step boundary; its first decode step recomputes the last prompt token and emits
   the client's **first token**; every running sequence then decodes one token per step (greedy; EOS
   ignored, so each request produces exactly ``output_len`` tokens).

Timestamps (s, :func:`~workbench.pd.disagg.link.now`): rank 0 records ``prefill_start``, ``prefill_end``
and the send thread's ``transfer_start`` / ``send_end``; rank 1 ``transfer_end`` (payload received and
synchronized), ``admit`` (written into a slot) and every token's time.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections import deque
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pandas as pd
import torch
import torch.distributed as dist

from workbench.engine import Engine
from workbench.pd.disagg.config import NCCL_ENV, DisaggConfig, placement, set_nccl_env
from workbench.pd.disagg.link import KVLink, KVReceiver, KVSender, now, probe_link
from workbench.pd.loop import _warm_up
from workbench.pd.profile import extend, run_profile

__all__ = ["prompts_for", "serve_decode", "serve_prefill", "worker"]

LEAD_S = 0.02  # the first arrival is this long after the run's start (both threads set up)
SWITCH_INTERVAL_S = 2e-4  # GIL hand-over: the link threads timestamp within ~0.2 ms, not Python's 5 ms


def prompts_for(workload, vocab_size: int, seed: int) -> list[torch.Tensor]:
    """The random prompts ``[prompt_len]`` int64 of ``workload``, drawn as
    :func:`workbench.pd.loop.run_serving` draws them (one seeded CPU generator, in request order)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size, (int(n),), generator=g) for n in workload.prompt_len]


def _event(device: torch.device):
    if device.type != "cuda":
        return None
    ev = torch.cuda.Event()
    ev.record()
    return ev


def _next_batch(waiting: deque, prompt_len: list, max_prompts: int, max_tokens: int) -> list:
    """FCFS: the head, then followers while ``max_prompts`` and ``max_tokens`` allow (run_prefill_only)."""
    batch, tokens = [], 0
    while waiting and len(batch) < max_prompts:
        n = prompt_len[waiting[0]]
        if batch and tokens + n > max_tokens:
            break
        batch.append(waiting.popleft())
        tokens += n
    return batch


def serve_prefill(eng: Engine, workload, prompts: list, config: DisaggConfig, link: KVLink) -> dict:
    """Rank 0's part of one run: admit ``workload``'s arrivals, prefill them and send their KV caches.
    Returns per request (lists in request order) ``arrival``, ``prefill_start``, ``prefill_end``,
    ``prefill_token``, ``transfer_start``, ``send_end`` (s, absolute), ``t0``, and with
    ``config.record_kv`` the sent caches (``sent_kv``, on the CPU)."""
    n = len(workload)
    arr, plen, nout = workload.arrival_s.tolist(), workload.prompt_len.tolist(), workload.output_len.tolist()
    nan = float("nan")
    out = {k: [nan] * n for k in ("prefill_start", "prefill_end")}
    out["prefill_token"] = [-1] * n
    sent = [None] * n if config.record_kv else None
    sender = KVSender(link)
    waiting: deque = deque()
    nxt = done = 0
    t0 = now() + LEAD_S
    while done < n:
        t = now()
        while nxt < n and t0 + arr[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        if not waiting:
            time.sleep(max(0.0, t0 + arr[nxt] - now()))
            continue
        batch = _next_batch(waiting, plen, config.max_prefill_batch, config.max_prefill_tokens)
        lens = torch.tensor([plen[r] for r in batch])
        tok = torch.zeros(len(batch), int(lens.max()), dtype=torch.int64)
        for j, r in enumerate(batch):
            tok[j, : plen[r]] = prompts[r]
            eng.truncate_slot(j, 0)
        start = now()
        first = extend(eng, torch.arange(len(batch)), tok, lens).argmax(-1).tolist()  # to the host: synchronizes
        end = now()
        for j, r in enumerate(batch):
            kv = eng.read_slot_kv(j, plen[r])
            if sent is not None:
                sent[r] = kv.cpu()
            sender.put([r, plen[r], first[j], int(prompts[r][-1]), nout[r]], kv, _event(eng.device))
            out["prefill_start"][r], out["prefill_end"][r], out["prefill_token"][r] = start, end, first[j]
        done += len(batch)
    sender.close()
    out["transfer_start"] = [sender.times[r][0] for r in range(n)]
    out["send_end"] = [sender.times[r][1] for r in range(n)]
    out |= {"arrival": [t0 + a for a in arr], "t0": t0, "sent_kv": sent}
    return out


def _admit(eng: Engine, transfer, slot: int, record_kv: bool) -> dict:
    """Write a received prompt's KV cache into ``slot``, keep ``prompt - 1`` positions (the first decode
    step recomputes the last prompt token, as vLLM's scheduler does with remote KV) and start its record."""
    h, kv = transfer.header, transfer.kv
    eng.write_slot_kv(slot, kv)
    if kv.is_cuda:  # allocated on the receive thread's stream, read by this one: keep it until the copy is done
        kv.record_stream(torch.cuda.current_stream(kv.device))
    eng.truncate_slot(slot, h["n_tokens"] - 1)
    return {"req_id": h["req_id"], "n_out": h["output_len"], "last": h["last_token"],
            "prefill_token_hdr": h["first_token"], "transfer_end": transfer.end_s, "admit": now(),
            "tokens": [], "token_t": [], "received_kv": kv.cpu() if record_kv else None}


def serve_decode(eng: Engine, link: KVLink, record_kv: bool = False) -> dict:
    """Rank 1's part of one run: receive transfers until STOP, admit them FCFS into free slots at step
    boundaries and decode every running sequence one token per step. Returns ``req_id -> record``
    (``transfer_end``, ``admit``, ``tokens``, ``token_t``, ``prefill_token_hdr``, ``received_kv``)."""
    recv = KVReceiver(link)
    free = list(range(eng.max_batch))[::-1]
    ready: deque = deque()
    running: dict[int, dict] = {}  # slot -> record
    done: dict[int, dict] = {}
    stopped = False
    while True:
        if not stopped:  # take what has arrived; wait only when there is nothing else to do
            item = recv.get(block=not running and not ready)
            while item is not None and not stopped:
                if item.kv is None:
                    stopped = True
                else:
                    ready.append(item)
                    item = recv.get(block=False)
        if stopped and not ready and not running:
            break
        while ready and free:
            s = free.pop()
            running[s] = _admit(eng, ready.popleft(), s, record_kv)
        slots = sorted(running)
        tok = torch.tensor([[running[s]["last"]] for s in slots])
        nxt = extend(eng, torch.tensor(slots), tok).argmax(-1).tolist()  # to the host: synchronizes
        t = now()
        for j, s in enumerate(slots):
            rec = running[s]
            rec["tokens"].append(nxt[j])
            rec["token_t"].append(t)
            rec["last"] = nxt[j]
            if len(rec["tokens"]) >= rec["n_out"]:
                done[rec["req_id"]] = running.pop(s)
                free.append(s)
    recv.join()
    return done


def _build(config: DisaggConfig, rank: int, device: torch.device, max_seq: int) -> Engine:
    slots = config.prefill_slots if rank == 0 else config.decode_slots
    return Engine.from_config(config.model, max_batch=slots, max_seq=max_seq, dtype=config.dtype, device=device,
                              use_graphs=False if rank == 0 else None, seed=config.weight_seed)


def _profile(eng: Engine, config: DisaggConfig, rank: int) -> list | None:
    """Rank 0 times the prefill grid, then rank 1 the decode grid (one after the other: on one GPU the
    two would share it). Rows as :func:`workbench.pd.profile.run_profile` gives them, as dicts."""
    p = config.profile
    rows = None
    for turn in (0, 1):
        if p is not None and turn == rank:
            if rank == 0:
                prof = run_profile(eng, replace(p, decode_batches=(1,), context_lens=(8,)))
                prof = prof[prof["phase"] == "prefill"]
            else:
                prof = run_profile(eng, replace(p, prefill_batches=(1,), prompt_lens=(8,)))
                prof = prof[prof["phase"] == "decode"]
            rows = prof.to_dict("records")
            eng.reset()
        dist.barrier()
    return rows


def _probe_tokens(config: DisaggConfig, eng: Engine) -> tuple:
    if config.probe_tokens is not None:
        return tuple(config.probe_tokens)
    big = (2**30 if eng.device.type == "cuda" else 2**23) // eng.kv_bytes_per_token()
    return (1, max(2, int(big)))


def _resolve_workloads(workloads, profile: list | None, rank: int, max_seq: int) -> list:
    """The workloads to serve: as given, or ``workloads(profile DataFrame)`` computed on rank 0 from both
    ranks' profile rows and broadcast (a load defined relative to the measured step times)."""
    if callable(workloads):
        halves = [None, None]
        dist.all_gather_object(halves, profile)
        box = [workloads(pd.DataFrame(halves[0] + halves[1])) if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        workloads = list(box[0])
    need = max(int((w.prompt_len + w.output_len).max()) for w in workloads)
    if need > max_seq:
        raise ValueError(f"a request needs {need} KV positions > DisaggConfig.max_seq={max_seq}; raise it")
    return workloads


def _serve_all(rank: int, config: DisaggConfig, workloads, device, backend) -> dict:
    eng = _build(config, rank, device, config.max_seq)
    s = eng.spec
    link = KVLink(device, backend, (s.n_layers, s.n_kv_heads, s.head_dim), eng.dtype)
    profile = _profile(eng, config, rank)
    workloads = _resolve_workloads(workloads, profile, rank, config.max_seq)
    probe = probe_link(rank, link, tokens=_probe_tokens(config, eng), repeats=config.probe_repeats)
    if rank == 0:
        _warm_up(eng, int(max(int(w.prompt_len.max()) for w in workloads)), config.max_prefill_batch)
    else:
        _warm_up(eng, 1, 1)
    runs = []
    for wl in workloads:
        prompts = prompts_for(wl, eng.vocab_size, config.prompt_seed) if rank == 0 else None
        gc.collect()
        dist.barrier()
        gc.disable()  # no collector pauses inside timed steps (as in workbench.pd.loop)
        try:
            runs.append(serve_prefill(eng, wl, prompts, config, link) if rank == 0
                        else serve_decode(eng, link, config.record_kv))
        finally:
            gc.enable()
        eng.reset()
    dist.barrier()
    return {"rank": rank, "device": str(device), "backend": backend, "runs": runs, "profile": profile,
            "probe": probe, "kv_bytes_per_token": eng.kv_bytes_per_token(), "dtype": str(eng.dtype),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "workloads": workloads if rank == 0 else None, "env": {k: os.environ.get(k) for k in NCCL_ENV}}


def worker(rank: int, config: DisaggConfig, workloads, run_dir: str) -> None:
    """Entry point of one spawned process (``torch.multiprocessing.spawn``): set the NCCL environment,
    join the two-rank process group (rendezvous file in ``run_dir``), build this rank's engine, profile,
    resolve the workloads (a list, or a function of the profile), probe the link, serve every workload
    in turn, and write ``run_dir/rank<rank>.pt``."""
    set_nccl_env()
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    threads = config.torch_threads or (None if torch.cuda.is_available() and config.device != "cpu" else 1)
    if threads:
        torch.set_num_threads(threads)
    device, backend = placement(config, rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    kw = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend, init_method=f"file://{Path(run_dir) / 'rendezvous'}", rank=rank,
                            world_size=2, timeout=timedelta(seconds=config.timeout_s), **kw)
    with torch.inference_mode():
        out = _serve_all(rank, config, workloads, device, backend)
    torch.save(out, Path(run_dir) / f"rank{rank}.pt")
    # only on success: after a failure the process exits at once (a collective left pending could block
    # the tear-down) and torch.multiprocessing.spawn terminates the other rank
    dist.destroy_process_group()
