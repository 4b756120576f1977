"""Results store: tidy DataFrames plus JSON provenance under ``data/results/``, written atomically.

Layout: ``<root>/<name>.parquet`` (the rows) and ``<root>/<name>.json`` (provenance of the run that
last wrote it, plus a list of earlier runs' provenance when a sweep appends). ``root`` is
``$WORKBENCH_RESULTS`` or ``data/results`` under the project root.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, is_dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

__all__ = ["collect_provenance", "load_results", "results_dir", "save_results", "sweep"]


def results_dir() -> Path:
    """``$WORKBENCH_RESULTS`` or ``<project>/data/results`` (created on first write)."""
    env = os.environ.get("WORKBENCH_RESULTS")
    return Path(env) if env else Path(__file__).resolve().parent.parent / "data" / "results"


def _git_commit() -> str:
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).resolve().parent, capture_output=True,
                           text=True, timeout=5, check=False)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=Path(__file__).resolve().parent, capture_output=True, text=True, timeout=5, check=False)
        return r.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if r.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def _device_name(model=None) -> str:
    import torch

    dev = None
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


def collect_provenance(model=None, seed: int | None = None, config: Any = None, **extra) -> dict:
    """Provenance for one run (DESIGN.md "Provenance"): model provenance (source, id/path, revision or
    sha256, dtype), config, device name, torch/transformers/workbench versions, git commit, seed,
    start time (UTC ISO 8601), host cores. ``wall_time_s`` is added by :func:`save_results`."""
    import torch
    import transformers

    import workbench
    from workbench.models import provenance_of

    prov = {
        "model": provenance_of(model) if model is not None else None,
        "config": _jsonable(config),
        "device": _device_name(model),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
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


def _atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _check_name(name: str) -> None:
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"results name {name!r} must be a plain file stem such as 'quant_sweep'")


def save_results(df: pd.DataFrame, name: str, provenance: dict | None = None, root: Path | None = None) -> Path:
    """Write ``df`` to ``<root>/<name>.parquet`` and ``provenance`` to ``<name>.json``, each atomically
    (temp file in the same folder, then ``os.replace``), so a crash never leaves a half-written file.

    Returns the parquet path. Raises ValueError for an unusable name.
    """
    _check_name(name)
    root = Path(root) if root is not None else results_dir()
    prov = dict(provenance or collect_provenance())
    t0 = prov.pop("_t0", None)
    if t0 is not None:
        prov["wall_time_s"] = round(time.time() - t0, 3)
    prov["rows"] = len(df)
    _atomic_write(root / f"{name}.parquet", lambda p: df.to_parquet(p, index=False))
    _atomic_write(root / f"{name}.json", lambda p: p.write_text(json.dumps(prov, indent=2, default=str)))
    return root / f"{name}.parquet"


def load_results(name: str, root: Path | None = None) -> pd.DataFrame:
    """Read ``<root>/<name>.parquet``; an empty DataFrame when it does not exist yet."""
    _check_name(name)
    path = (Path(root) if root is not None else results_dir()) / f"{name}.parquet"
    return pd.read_parquet(path) if path.exists() else pd.DataFrame()


def _config_key(cfg: Any) -> str:
    return json.dumps(_jsonable(cfg), sort_keys=True)


def sweep(name: str, configs: Iterable[Any], fn: Callable[[Any], pd.DataFrame], provenance: dict | None = None,
          root: Path | None = None, progress: bool = True) -> pd.DataFrame:
    """Run ``fn(config)`` for each config, appending its rows to the store after every point.

    Points whose config key (the config serialized as sorted JSON, stored in column ``config_key``)
    is already in the store are skipped, so an interrupted sweep resumes where it stopped. ``fn``
    returns a DataFrame (one or more rows) or a dict (one row). Returns all stored rows for ``name``.
    """
    from tqdm.auto import tqdm

    configs = list(configs)
    done = load_results(name, root)
    seen = set(done["config_key"]) if "config_key" in done else set()
    todo = [c for c in configs if _config_key(c) not in seen]
    prov = dict(provenance or collect_provenance())
    for cfg in tqdm(todo, desc=name, disable=not progress or not todo):
        rows = fn(cfg)
        rows = pd.DataFrame([rows]) if isinstance(rows, dict) else rows.copy()
        rows["config_key"] = _config_key(cfg)
        done = pd.concat([done, rows], ignore_index=True) if len(done) else rows
        save_results(done, name, {**prov, "_t0": prov.get("_t0")}, root)
    return done
