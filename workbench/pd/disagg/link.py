"""KV-cache transport from a prefill worker (rank 0) to a decode worker (rank 1) over ``torch.distributed``
point-to-point ``send``/``recv``, and the probe that measures the link.

Framing follows vLLM's ``P2pNcclConnector`` (``vllm/distributed/kv_transfer/kv_connector/v1/p2p/
p2p_nccl_engine.py``, ``P2pNcclEngine.send_sync`` / ``listen_for_requests``): a small control message
announces each transfer (there msgpack over ZMQ with tensor id, shape and dtype; here an int64
:data:`HEADER` over the same process group), the receiver allocates the buffer the header describes, and
the payload goes in one ``ncclSend``/``ncclRecv`` on a dedicated CUDA stream that the caller
synchronizes before the tensor is handed on. As there, a send thread on the producer (its ``PUT_ASYNC``
mode) sends one transfer at a time, and a listener thread on the consumer receives them and files them
for the scheduler. One difference: one message per request carries every layer's keys and values
(:meth:`workbench.engine.Engine.read_slot_kv`, ``[2, n_layers, n_kv_heads, tokens, head_dim]``), where
vLLM sends one tensor per layer.

Backends: NCCL when the two ranks hold two CUDA devices; gloo otherwise. NCCL refuses two ranks on one
GPU (``ncclInvalidUsage``, "Duplicate GPU detected"), so with both ranks on ``cuda:0`` the payload is
staged through pinned host memory (device -> host on the sender's stream, gloo over loopback, host ->
device on the receiver's) and the "link" is that path, not NVLink.

Clock: :func:`now` is ``CLOCK_MONOTONIC``, one clock for every process of a host, so a send started on
rank 0 and a receive finished on rank 1 give a transfer time; both ranks must run on one host.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

__all__ = ["HEADER", "STOP", "KVLink", "KVReceiver", "KVSender", "Transfer", "link_fit", "now", "probe_link"]

HEADER = ("req_id", "n_tokens", "first_token", "last_token", "output_len")  # int64 fields, in order
STOP = -1  # req_id of the message that ends a run


def now() -> float:
    """Seconds on ``CLOCK_MONOTONIC`` (system-wide: comparable between processes of one host)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


@dataclass
class Transfer:
    """One received transfer: its header fields, the KV cache ``[2, n_layers, n_kv_heads, n_tokens,
    head_dim]`` on the receiver's device (None for :data:`STOP`) and when the receive finished (s,
    :func:`now`)."""

    header: dict
    kv: torch.Tensor | None
    end_s: float


class KVLink:
    """This process's end of the rank 0 -> rank 1 link, used by one thread at a time: create it once,
    then :meth:`bind` it in the thread that uses it (on CUDA: that thread's device; the link owns one
    stream for its transfers and, when staged, one pinned host buffer that grows to the largest
    transfer and is reused, so no transfer pays for pinning memory once the probe has run).

    ``kv_dims`` = ``(n_layers, n_kv_heads, head_dim)`` and ``dtype``: the payload layout both engines
    share. ``backend``: the process group's (``"nccl"``: payload sent from device memory; ``"gloo"``:
    from host memory, staged through the pinned buffer when ``device`` is CUDA).
    """

    def __init__(self, device: torch.device, backend: str, kv_dims: tuple[int, int, int], dtype: torch.dtype):
        if backend not in ("nccl", "gloo"):
            raise ValueError(f"backend={backend!r}; use 'nccl' or 'gloo'")
        if backend == "nccl" and device.type != "cuda":
            raise ValueError("the nccl backend needs CUDA devices; use backend='gloo' on the CPU")
        self.device, self.backend, self.kv_dims, self.dtype = device, backend, tuple(kv_dims), dtype
        self.wire = device if backend == "nccl" else torch.device("cpu")
        self.staged = backend == "gloo" and device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self._host: torch.Tensor | None = None  # pinned staging bytes (staged only)
        self.bind()

    def bind(self) -> None:
        """Make this link usable from the calling thread (CUDA: set the thread's current device)."""
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)

    def shape(self, n_tokens: int) -> tuple[int, ...]:
        """Payload shape of ``n_tokens`` positions: ``[2, n_layers, n_kv_heads, n_tokens, head_dim]``."""
        n_layers, n_kv, hd = self.kv_dims
        return (2, n_layers, n_kv, int(n_tokens), hd)

    def _staging(self, shape: tuple) -> torch.Tensor:
        numel = int(np.prod(shape))
        nbytes = numel * torch.empty((), dtype=self.dtype).element_size()
        if self._host is None or self._host.numel() < nbytes:
            self._host = None
            self._host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        return self._host[:nbytes].view(self.dtype).view(shape)

    def _on_stream(self):
        return torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def _sync(self) -> None:
        if self.stream is not None:
            self.stream.synchronize()

    def send(self, header: list[int], kv: torch.Tensor | None = None, ready=None) -> None:
        """Send ``header`` (the :data:`HEADER` fields) then, unless it is :data:`STOP`, ``kv``
        (:meth:`shape` of ``header[1]`` tokens, contiguous, on the device). ``ready``: a CUDA event the
        payload's producer recorded; the link's stream waits for it. Returns when the send has
        completed on this side."""
        with self._on_stream():
            if ready is not None and self.stream is not None:
                self.stream.wait_event(ready)
            dist.send(torch.tensor(header, dtype=torch.int64).to(self.wire), dst=1)
            if header[0] != STOP:
                if self.staged:
                    host = self._staging(tuple(kv.shape))
                    host.copy_(kv, non_blocking=True)
                    self._sync()
                    kv = host
                dist.send(kv, dst=1)
            self._sync()

    def recv(self) -> Transfer:
        """Receive one header and its payload (allocated from the header) from rank 0."""
        with self._on_stream():
            h = torch.empty(len(HEADER), dtype=torch.int64, device=self.wire)
            dist.recv(h, src=0)
            header = dict(zip(HEADER, h.tolist()))
            if header["req_id"] == STOP:
                return Transfer(header, None, now())
            shape = self.shape(header["n_tokens"])
            if self.staged:
                buf = self._staging(shape)
                dist.recv(buf, src=0)
                kv = buf.to(self.device, non_blocking=True)
            else:
                kv = torch.empty(shape, dtype=self.dtype, device=self.wire)
                dist.recv(kv, src=0)
            self._sync()
        return Transfer(header, kv, now())


class KVSender:
    """The producer's send thread: :meth:`put` queues a transfer; the thread sends them one at a time
    (one transfer at a time on the link, as the simulator assumes) and records each one's start and
    end (s, :func:`now`) in ``times[req_id]``. :meth:`close` sends :data:`STOP`, joins, and re-raises
    an error of the thread."""

    def __init__(self, link: KVLink):
        self.link = link
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self.times: dict[int, tuple[float, float]] = {}
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kv-send", daemon=True)
        self._thread.start()

    def put(self, header: list[int], kv: torch.Tensor, ready=None) -> None:
        """Queue ``kv`` (kept alive until sent) with its header; ``ready`` as in :meth:`KVLink.send`."""
        if self.error is not None:
            raise RuntimeError("the KV send thread failed") from self.error
        self._q.put((header, kv, ready))

    def close(self) -> None:
        self._q.put(None)
        self._thread.join()
        if self.error is not None:
            raise RuntimeError("the KV send thread failed") from self.error

    def _run(self) -> None:
        try:
            link = self.link
            link.bind()
            while (item := self._q.get()) is not None:
                header, kv, ready = item
                t0 = now()
                link.send(header, kv, ready)
                self.times[header[0]] = (t0, now())
            link.send([STOP, 0, 0, 0, 0])
        except BaseException as e:  # noqa: BLE001 - handed to the main thread by put/close
            self.error = e


class KVReceiver:
    """The consumer's listener thread: receives transfers until :data:`STOP` and queues each
    :class:`Transfer` (the last one is the STOP transfer). :meth:`get` takes the next one."""

    def __init__(self, link: KVLink):
        self.link = link
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kv-recv", daemon=True)
        self._thread.start()

    def get(self, block: bool, poll_s: float = 0.5) -> Transfer | None:
        """The next received transfer, or None when ``block`` is False and none is waiting. Blocking
        waits re-check every ``poll_s`` s that the thread is alive; raises RuntimeError if it failed."""
        while True:
            try:
                return self._q.get(block=block, timeout=poll_s if block else None)
            except queue.Empty:
                if self.error is not None or not self._thread.is_alive():
                    raise RuntimeError("the KV receive thread stopped before STOP") from self.error
                if not block:
                    return None

    def join(self) -> None:
        self._thread.join()

    def _run(self) -> None:
        try:
            link = self.link
            link.bind()
            while True:
                t = link.recv()
                self._q.put(t)
                if t.kv is None:
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the main thread by get
            self.error = e


def probe_link(rank: int, link: KVLink, tokens: tuple[int, ...], repeats: int = 5,
               settle_s: float = 0.005) -> list[dict]:
    """Time transfers of ``tokens`` positions (each size ``repeats`` times, one warm-up) through ``link``
    (the serving path); both ranks call it. A barrier precedes every transfer; rank 1 then waits in
    ``recv`` while rank 0 sleeps ``settle_s`` (so that the receive is posted, as the listener thread's
    always is while serving), reads the clock and sends; rank 1 reads the clock when the payload is in.
    Returns on rank 0 the send start times and on rank 1 the receive end times: ``[{"tokens", "bytes",
    "t_s": [...]}]``; :func:`link_fit` turns the two halves into transfer times."""
    link.bind()
    esize = torch.empty((), dtype=link.dtype).element_size()
    rows = []
    for n in tokens:
        kv = None
        if rank == 0:
            kv = torch.empty(link.shape(n), dtype=link.dtype, device=link.device).uniform_()
            if link.device.type == "cuda":
                torch.cuda.synchronize(link.device)
        ts = []
        for i in range(repeats + 1):
            dist.barrier()
            if rank == 0:
                time.sleep(settle_s)
                t0 = now()
                link.send([i, n, 0, 0, 0], kv)
                ts.append(t0)
            else:
                ts.append(link.recv().end_s)
        rows.append({"tokens": int(n), "bytes": int(np.prod(link.shape(n))) * esize, "t_s": ts[1:]})
        del kv
    dist.barrier()
    return rows


def link_fit(send_rows: list[dict], recv_rows: list[dict]) -> dict:
    """Latency and bandwidth from :func:`probe_link`'s two halves (median time per size): ``latency_ms``
    = the smallest transfer's time, ``gbs`` = (largest - smallest bytes) / (their time difference), in
    GB/s (1e9 bytes), i.e. the two-point line ``ms = latency_ms + bytes / (gbs * 1e6)`` of
    :meth:`workbench.pd.sim.SimConfig.transfer_ms` (DistServe, arXiv 2401.09670, sec. 4.3); per-size
    medians, minima and maxima in ``sizes``. ``gbs`` is NaN (with a warning) when the largest transfer
    was not the slower one: the sizes are too close to tell apart on this link, or the ranks' clocks
    disagree (they must share a host)."""
    sizes = []
    for s, r in zip(send_rows, recv_rows):
        ms = (np.asarray(r["t_s"]) - np.asarray(s["t_s"])) * 1e3
        sizes.append({"tokens": s["tokens"], "bytes": s["bytes"], "ms": float(np.median(ms)),
                      "ms_min": float(ms.min()), "ms_max": float(ms.max())})
    small, large = min(sizes, key=lambda x: x["bytes"]), max(sizes, key=lambda x: x["bytes"])
    gbs = float("nan")
    if large["ms"] > small["ms"] > 0:
        gbs = (large["bytes"] - small["bytes"]) / ((large["ms"] - small["ms"]) * 1e6)
    else:
        warnings.warn(f"link probe: {small['bytes']} bytes took {small['ms']:.4f} ms and {large['bytes']} bytes "
                      f"{large['ms']:.4f} ms, so no bandwidth follows; probe a larger transfer (DisaggConfig."
                      "probe_tokens) and keep both ranks on one host", stacklevel=2)
    return {"latency_ms": small["ms"], "gbs": gbs, "sizes": sizes}
