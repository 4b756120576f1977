"""Results store: tidy DataFrames with per-row run ids and every run's provenance, under ``data/results/``.

Layout, for a store ``name`` under ``root`` (``$WORKBENCH_RESULTS`` or ``data/results`` under the project):

- ``<name>.parquet``: the rows. Every row carries ``run_id`` (the run that computed it) and the
  identity columns :data:`IDENTITY_COLUMNS`; rows written by :func:`sweep` also carry ``point_key``
  and ``config_key`` (below). The file's key-value metadata (``workbench.results``) holds the whole
  run history, so the parquet alone is self-describing.
- ``<name>.json``: the same run history for people (``"runs"``: one provenance record per run, each
  with its ``run_id``), plus, at the top level, the record of the run that last wrote the store.
  It states no row counts: count rows in the parquet.

Point key (:func:`sweep`). A point is identified by ``point_key``, a digest of these columns, all stored:
``config_key`` (the config as sorted JSON), ``model_key`` (digest of ``provenance["model"]`` without
the fields in :data:`VOLATILE_MODEL_FIELDS`: source, model id or path, revision or sha256, dtype, and
the ``weights_digest`` that :func:`collect_provenance` adds), ``data_key`` (digest of
``provenance["data"]``), ``engine_key`` (digest of ``provenance["engine"]``: which engine ran the point and
with which kernel settings), ``device_name`` and ``workbench_version``. A point is skipped only when its
``point_key`` is already stored; a point computed on other weights, data, device or workbench version
is recomputed and both rows are kept. :func:`load_results` with ``provenance=`` (or :func:`select`)
returns the rows of one identity::

    prov = collect_provenance(model, seed=0, data={"mmlu_test": data_digest(questions)})
    grid = sweep("mmlu_shots", configs, fn, provenance=prov)      # this model's rows of these configs
    mine = load_results("mmlu_shots", provenance=prov)              # every config, this model and data
    same_model = load_results("mmlu_shots", provenance=prov, on=("model_key",))

Run history. Every call of :func:`save_results`, and every :func:`sweep` that stores a point, adds
(or, for a ``run_id`` already there, updates) a run record: the provenance of :func:`collect_provenance` plus ``wall_time_s`` (start to
the run's latest save) and ``keys`` (its identity columns). Records are never dropped, so a row points
at the run that computed it even after later runs resumed the store.

Crash safety. Writers hold an exclusive ``flock`` on ``root`` while they read, merge and write; each
save writes the JSON, then the parquet, each to a temp file in ``root`` (created with mode 0666
minus the umask, so the user's group can read the store when the umask allows it), fsynced and
renamed with ``os.replace``. A process killed at any moment therefore leaves the previous or the new
version of each file, the JSON's runs always include every ``run_id`` in the parquet, and the temp
files it left (``.<name>.parquet.*.tmp``, ``.<name>.json.*.tmp``) are removed by the next writer of
that store. Readers take no lock and write nothing.

Stores written before run ids existed load with ``run_id == "legacy"`` and the old JSON as the
``"legacy"`` run record; their rows have no ``point_key`` and are never reused.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import secrets
import subprocess
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, is_dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["IDENTITY_COLUMNS", "STORE_COLUMNS", "VOLATILE_MODEL_FIELDS", "collect_provenance", "data_digest",
           "identity", "load_results", "load_runs", "results_dir", "save_results", "select", "sweep",
           "weights_digest"]

META_KEY = b"workbench.results"  # parquet key-value metadata entry holding {"format", "runs"}
FORMAT = 2
# identity of a point besides its config; a reader filters on these to get one model's rows
IDENTITY_COLUMNS = ("model_key", "data_key", "engine_key", "device_name", "workbench_version")
# columns the store adds to every sweep row (a run function must not return them)
STORE_COLUMNS = ("run_id", "point_key", "config_key", *IDENTITY_COLUMNS)
# provenance_of fields that say where a copy lives or describe it, not which weights it holds
VOLATILE_MODEL_FIELDS = frozenset({"cache_path", "note"})
LEGACY_RUN = "legacy"


def results_dir() -> Path:
    """``$WORKBENCH_RESULTS`` or ``<project>/data/results`` (created on first write)."""
    env = os.environ.get("WORKBENCH_RESULTS")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "data" / "results"


def _git_commit() -> str:
    here = Path(__file__).resolve().parent
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5,
                           check=False)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=5, check=False)
        return r.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if r.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def _device_name(model=None) -> str:
    import torch

    dev = None
    if isinstance(model, Mapping):  # {"target": ..., "draft": ...}: the first model's device
        model = next(iter(model.values()), None)
    if model is not None:
        try:
            dev = next(model.parameters()).device
        except (StopIteration, AttributeError):
            dev = None
    if (dev is not None and dev.type == "cuda") or (dev is None and torch.cuda.is_available()):
        return torch.cuda.get_device_name(dev)
    return f"cpu ({platform.processor() or platform.machine()})"


def _jsonable(x: Any) -> Any:
    if is_dataclass(x) and not isinstance(x, type):
        return {k: _jsonable(v) for k, v in asdict(x).items()}
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


def _digest(x: Any) -> str:
    """First 16 hex digits of the sha256 of ``x`` as sorted JSON."""
    return hashlib.sha256(json.dumps(_jsonable(x), sort_keys=True).encode()).hexdigest()[:16]


def weights_digest(model, n_sample: int = 4096) -> str | None:
    """sha256 (hex) of every ``state_dict`` tensor's name, dtype, shape and the bytes of ``n_sample``
    evenly spaced elements (all of them in smaller tensors); ``None`` for an object without a state dict.

    A fingerprint, not a checksum of every byte: other checkpoints, re-initialisations, fine-tunes and
    quantized copies differ in the sampled elements; an edit of a few unsampled weights goes unseen.
    Costs ``n_sample`` elements per tensor of device-to-host copy (a few MB for a 7B model); exact
    bytes, so it does not depend on thread count.
    """
    import torch

    if not hasattr(model, "state_dict"):
        return None
    h = hashlib.sha256()
    with torch.no_grad():
        for name, t in model.state_dict().items():
            flat = t.detach().reshape(-1)
            n = flat.numel()
            if n > n_sample:
                idx = torch.arange(n_sample, dtype=torch.int64) * (n - 1) // (n_sample - 1)
                flat = flat[idx.to(flat.device)]
            h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
            h.update(flat.cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def data_digest(obj: Any) -> str:
    """sha256 (hex) of evaluation data, for ``provenance["data"]``: a DataFrame (its CSV, index
    dropped), ``str``, ``bytes``, a tensor or array (dtype, shape and bytes), or anything JSON-able.
    Equal content gives an equal digest in every process."""
    import numpy as np
    import torch

    if isinstance(obj, pd.DataFrame):
        raw = obj.to_csv(index=False).encode()
    elif isinstance(obj, str):
        raw = obj.encode()
    elif isinstance(obj, bytes):
        raw = obj
    elif isinstance(obj, (torch.Tensor, np.ndarray)):
        a = obj.detach().cpu().contiguous() if isinstance(obj, torch.Tensor) else np.ascontiguousarray(obj)
        body = a.view(torch.uint8).numpy().tobytes() if isinstance(a, torch.Tensor) else a.tobytes()
        raw = f"{a.dtype}|{tuple(a.shape)}|".encode() + body
    else:
        raw = json.dumps(_jsonable(obj), sort_keys=True).encode()
    return hashlib.sha256(raw).hexdigest()


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _model_provenance(model) -> dict:
    from workbench.models import provenance_of

    if isinstance(model, Mapping):
        return {str(k): _model_provenance(m) for k, m in model.items()}
    prov, digest = provenance_of(model), weights_digest(model)
    if not prov and digest is None:
        raise TypeError(f"model= must be a torch.nn.Module or a dict of them (e.g. {{'target': t, 'draft': d}}); "
                        f"a {type(model).__name__} has neither workbench provenance nor a state_dict, so points "
                        "computed on it could not be told apart from another model's")
    return {**prov, "weights_digest": digest}


def collect_provenance(model=None, seed: int | None = None, config: Any = None, **extra) -> dict:
    """Provenance of one run (DESIGN.md "Provenance").

    Fields: ``run_id`` (new for each call), ``model`` (``workbench.models.provenance_of(model)``:
    source, model id or path, revision or sha256, dtype; plus ``weights_digest``, see
    :func:`weights_digest`; for a dict of models, e.g. ``{"target": t, "draft": d}``, one such entry
    per name; ``None`` without a model), ``config``, ``device``, ``torch`` /
    ``transformers`` / ``workbench`` versions, ``git_commit`` (``+dirty`` with uncommitted changes),
    ``seed``, ``start_time`` (UTC ISO 8601), ``host_cores``, ``torch_threads`` and the ``extra``
    keywords, e.g. ``data={...}``: the data's identity, part of every point's key in :func:`sweep`
    (names, splits, sizes, and :func:`data_digest` of what was actually used).

    Raises TypeError for a ``model`` that is neither a module with a state dict nor carries workbench
    provenance (an engine or a wrapper: pass the model it was built from).
    """
    import torch

    import workbench

    model_prov = None if model is None else _model_provenance(model)
    prov = {
        "run_id": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3),
        "model": _jsonable(model_prov),
        "config": _jsonable(config),
        "device": _device_name(model),
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "workbench": workbench.__version__,
        "git_commit": _git_commit(),
        "seed": seed,
        "start_time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "_t0": time.time(),
        "host_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    prov.update(_jsonable(extra))
    return prov


def identity(provenance: dict) -> dict:
    """The identity columns (:data:`IDENTITY_COLUMNS`) of rows computed under ``provenance``:
    ``model_key`` and ``data_key`` (16-hex digests of ``provenance["model"]`` minus
    :data:`VOLATILE_MODEL_FIELDS`, and of ``provenance["data"]``), ``engine_key`` (digest of
    ``provenance["engine"]``: the backend and its kernel settings, :mod:`workbench.studies.engines`),
    ``device_name``, ``workbench_version``."""
    import workbench

    def stable(x):
        if isinstance(x, dict):
            return {k: stable(v) for k, v in x.items() if k not in VOLATILE_MODEL_FIELDS}
        return x

    return {"model_key": _digest(stable(provenance.get("model"))), "data_key": _digest(provenance.get("data")),
            "engine_key": _digest(provenance.get("engine")), "device_name": str(provenance.get("device") or _device_name()),
            "workbench_version": str(provenance.get("workbench") or workbench.__version__)}


def select(df: pd.DataFrame, provenance: dict, on: Iterable[str] = IDENTITY_COLUMNS) -> pd.DataFrame:
    """Rows of ``df`` whose identity columns ``on`` equal those of ``provenance`` (see :func:`identity`),
    e.g. ``on=("model_key",)`` for one model's rows on any data. Raises ValueError for an unknown column."""
    want = identity(provenance)
    on = list(on)
    bad = [c for c in on if c not in want]
    if bad:
        raise ValueError(f"on={bad} are not identity columns; use a subset of {list(IDENTITY_COLUMNS)}")
    if df.empty or any(c not in df for c in on):
        return df.iloc[0:0]
    mask = pd.Series(True, index=df.index)
    for c in on:
        mask &= df[c] == want[c]
    return df[mask]


def _check_name(name: str) -> None:
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"results name {name!r} must be a plain file stem such as 'quant_sweep'")


def _root(root) -> Path:
    return Path(root) if root is not None else results_dir()


def _read(root: Path, name: str) -> tuple[pd.DataFrame, dict]:
    """``(rows, runs)``: the parquet's rows and the run history (``run_id -> record``) from the JSON,
    completed by the parquet's own metadata (the JSON is written first, so its records are newer)."""
    import pyarrow.parquet as pq

    pq_path, js_path = root / f"{name}.parquet", root / f"{name}.json"
    runs: dict = {}
    legacy: dict | None = None
    if js_path.exists():
        try:
            meta = json.loads(js_path.read_text())
        except json.JSONDecodeError as e:
            warnings.warn(f"{js_path} is not valid JSON ({e}); using the run history in the parquet", stacklevel=3)
            meta = {}
        if "runs" in meta:
            runs = {r["run_id"]: r for r in meta["runs"]}
        elif meta:
            legacy = {k: v for k, v in meta.items() if k != "rows"}
    if not pq_path.exists():
        return pd.DataFrame(), runs
    table = pq.read_table(pq_path)
    raw = (table.schema.metadata or {}).get(META_KEY)
    df = table.to_pandas()
    if raw is not None:
        for r in json.loads(raw)["runs"]:
            runs.setdefault(r["run_id"], r)
    if "run_id" not in df:
        df["run_id"] = LEGACY_RUN
    if (df["run_id"] == LEGACY_RUN).any() and LEGACY_RUN not in runs:
        runs[LEGACY_RUN] = {**(legacy or {}), "run_id": LEGACY_RUN,
                            "note": "rows written before per-row run ids; this is the provenance of the run "
                                    "that last wrote the file, which need not have computed every row"}
    return df, runs


def load_results(name: str, root: Path | None = None, *, provenance: dict | None = None,
                 on: Iterable[str] = IDENTITY_COLUMNS) -> pd.DataFrame:
    """Every stored row of ``name`` (an empty DataFrame when the store does not exist yet); with
    ``provenance``, only the rows of its identity (:func:`select` with ``on``). Raises ValueError for
    an unusable name."""
    _check_name(name)
    df, _ = _read(_root(root), name)
    return df if provenance is None else select(df, provenance, on)


def load_runs(name: str, root: Path | None = None) -> dict[str, dict]:
    """The run history of ``name``: ``run_id -> provenance record``, in the order the runs first wrote.
    Join it to the rows on ``run_id`` to see which run (commit, start time, model) computed each row."""
    _check_name(name)
    return _read(_root(root), name)[1]


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Exclusive ``flock`` on the folder ``root`` (released when the process dies, even by SIGKILL)."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as e:  # e.g. a file system without locks: proceed, concurrent writers may collide
            warnings.warn(f"cannot lock {root} ({e}); do not write this store from two processes", stacklevel=4)
        yield
    finally:
        os.close(fd)


def _atomic_write(path: Path, write: Callable[[Any], None]) -> None:
    """``write(binary_file)`` into a temp file beside ``path`` (mode 0666 minus the umask), fsync, rename."""
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _check_writable(root: Path) -> None:
    """Write and remove a temp file in ``root``; OSError naming the folder and the fix if that fails."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        _atomic_write(probe := root / f".write-check.{secrets.token_hex(4)}", lambda f: None)
        probe.unlink()
    except OSError as e:
        raise OSError(f"the results folder {root} cannot be written ({type(e).__name__}: {e}); set WORKBENCH_RESULTS "
                      "to a writable folder or pass root=") from None


def _run_record(prov: dict) -> dict:
    rec = {k: v for k, v in prov.items() if k != "_t0"}
    if prov.get("_t0") is not None:
        rec["wall_time_s"] = round(time.time() - prov["_t0"], 3)
    rec["keys"] = identity(prov)
    return _jsonable(rec)


def _write(root: Path, name: str, df: pd.DataFrame, runs: dict, latest: str) -> None:
    """Under the lock: remove stale temp files, then write the JSON and the parquet (in that order)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for stale in [*root.glob(f".{name}.parquet.*.tmp"), *root.glob(f".{name}.json.*.tmp")]:
        stale.unlink(missing_ok=True)
    history = list(runs.values())
    text = json.dumps({**runs[latest], "runs": history}, indent=2, default=str)
    _atomic_write(root / f"{name}.json", lambda f: f.write(text.encode()))
    table = pa.Table.from_pandas(df, preserve_index=False)
    meta = {**(table.schema.metadata or {}), META_KEY: json.dumps({"format": FORMAT, "runs": history}).encode()}
    table = table.replace_schema_metadata(meta)
    _atomic_write(root / f"{name}.parquet", lambda f: pq.write_table(table, f))


def _complete(provenance: dict | None) -> dict:
    """``provenance`` over the defaults of :func:`collect_provenance` (a hand-made dict gets a run id,
    versions, device and start time)."""
    return {**collect_provenance(), **(provenance or {})}


def save_results(df: pd.DataFrame, name: str, provenance: dict | None = None, root: Path | None = None) -> Path:
    """Write ``df`` as the rows of ``<root>/<name>.parquet`` and add this run to the store's history.

    Rows without a ``run_id`` are attributed to this run (``provenance["run_id"]``) and get its
    identity columns where they have none; rows with one (e.g. from :func:`load_results`) keep it.
    Earlier runs' records are kept. Writes as described in the module docstring (lock, JSON then
    parquet, atomic, stale temp files removed). Returns the parquet path.

    Raises:
        ValueError: an unusable name, or rows whose ``run_id`` is in neither this store's history
            nor this run (drop the column to attribute them to this run).
    """
    _check_name(name)
    root = _root(root)
    prov = _complete(provenance)
    rid = prov["run_id"]
    out = df.copy()
    for col in ("run_id", *IDENTITY_COLUMNS):
        if col not in out:
            out[col] = pd.Series(pd.NA, index=out.index, dtype=object)
    new = out["run_id"].isna()
    for col, value in {"run_id": rid, **identity(prov)}.items():
        out[col] = out[col].where(~(new & out[col].isna()), value)
    with _locked(root):
        _, runs = _read(root, name)
        unknown = sorted(set(out["run_id"]) - set(runs) - {rid})
        if unknown:
            raise ValueError(f"rows of runs {unknown[:5]} are not in the history of {name!r}; drop the run_id "
                             "column to attribute them to this run")
        runs[rid] = _run_record(prov)
        _write(root, name, out, runs, rid)
    return root / f"{name}.parquet"


def _config_key(cfg: Any) -> str:
    return json.dumps(_jsonable(cfg), sort_keys=True)


def _append(root: Path, name: str, rows: pd.DataFrame, prov: dict) -> pd.DataFrame:
    """Under the lock: re-read the store, append ``rows`` (one point) unless a concurrent run stored
    that point already, update this run's record, write; returns all rows."""
    with _locked(root):
        df, runs = _read(root, name)
        if "point_key" in df and (df["point_key"] == rows["point_key"].iloc[0]).any():
            return df
        df = pd.concat([df, rows], ignore_index=True) if len(df) else rows
        runs[prov["run_id"]] = _run_record(prov)
        _write(root, name, df, runs, prov["run_id"])
    return df


def sweep(name: str, configs: Iterable[Any], fn: Callable[[Any], pd.DataFrame | dict], provenance: dict | None = None,
          root: Path | None = None, progress: bool = True) -> pd.DataFrame:
    """Run ``fn(config)`` for each config not yet stored under this identity, saving after every point.

    ``provenance``: from :func:`collect_provenance` (model, ``data=`` identity, seed...); with ``None``
    the point key has no model or data identity. Each point's key is described in the module
    docstring: a point is skipped only when the store holds its ``point_key`` (same config, model
    weights, data, device and workbench version), so an interrupted sweep resumes where it stopped
    and a sweep on other weights or data recomputes every point and keeps the old rows beside the new.
    ``fn`` returns a DataFrame (one or more rows) or a dict (one row), without the columns in
    :data:`STORE_COLUMNS`, which the store adds; a point that returns no rows is not recorded and
    runs again next time. Configs with equal keys run once; a point that a concurrent writer stored
    while ``fn`` ran is not stored twice.

    Returns the rows of the requested points under this identity (earlier runs' rows included), in
    config order; :func:`load_results` gives every row. Raises ValueError for an unusable name or a
    row that carries a store column, OSError (before any point is computed) for a results folder
    that cannot be written.
    """
    from tqdm.auto import tqdm

    _check_name(name)
    root = _root(root)
    prov = _complete(provenance)
    ident = identity(prov)
    points: dict[str, tuple[Any, str]] = {}
    for cfg in configs:
        ck = _config_key(cfg)
        points.setdefault(_digest([ck, *ident.values()]), (cfg, ck))
    done, _ = _read(root, name)
    have = set(done["point_key"].dropna()) if "point_key" in done else set()
    todo = [(pk, cfg, ck) for pk, (cfg, ck) in points.items() if pk not in have]
    if todo:
        _check_writable(root)
    for pk, cfg, ck in tqdm(todo, desc=name, disable=not progress or not todo):
        rows = fn(cfg)
        rows = pd.DataFrame([rows]) if isinstance(rows, dict) else rows.copy()
        clash = [c for c in STORE_COLUMNS if c in rows]
        if clash:
            raise ValueError(f"fn returned store column(s) {clash}; rename them (the store adds {list(STORE_COLUMNS)})")
        if len(rows):
            done = _append(root, name, rows.assign(run_id=prov["run_id"], point_key=pk, config_key=ck, **ident),
                           prov)
    if done.empty or "point_key" not in done:
        return done.iloc[0:0]
    mine = done[done["point_key"].isin(list(points))]
    order = pd.Categorical(mine["point_key"], categories=list(points), ordered=True)
    return mine.assign(_order=order).sort_values("_order", kind="stable").drop(columns="_order").reset_index(drop=True)
