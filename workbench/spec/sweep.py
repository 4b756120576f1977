"""``run_spec_sweep``: a speculative-decoding grid through the results store, point by point, so an
interrupted run resumes where it stopped.

A *point* is one (draft, config, block of prompts); its key (what :func:`workbench.results.sweep`
matches to skip finished points) holds the draft's build identity (``info["draft_key"]`` from
:func:`workbench.spec.make_draft`), the config fields, the prompt ids of the block, the loop asked
for, the device and the clock. The provenance handed to the store carries the target model's
provenance and, under ``"data"``, the prompts' identity (their ids and the sha256 of their token ids),
so a point computed on other weights or other prompts is not reused. Points run sampling setting by
sampling setting, block by block, so the target's plain decode of a prompt (the timing baseline and
the trajectory each draft is aligned on) is computed once per block and shared by every draft and
config of that block.
"""

from __future__ import annotations

import hashlib
import json
import time

import pandas as pd
import torch

from workbench.results import collect_provenance, sweep
from workbench.spec.config import SpecConfig
from workbench.spec.run import SpecCache, default_runners, run_spec, sampling_key


def prompts_identity(prompts: pd.DataFrame, stop_token_ids=()) -> dict:
    """``{"prompt_ids", "n_prompts", "tokens_sha256", "stop_token_ids"}`` of an ``encode_prompts``
    frame: what makes two prompt sets the same data."""
    ids = [[int(t) for t in p] for p in prompts["prompt_ids"]]
    digest = hashlib.sha256(json.dumps(ids).encode()).hexdigest()
    return {"prompt_ids": prompts["prompt_id"].tolist(), "n_prompts": len(ids), "tokens_sha256": digest,
            "stop_token_ids": [int(t) for t in stop_token_ids]}


def _draft_key(name: str, d) -> dict:
    info = d[1] if isinstance(d, tuple) and len(d) > 1 and isinstance(d[1], dict) else {}
    return json.loads(json.dumps(info.get("draft_key", {"draft": name}), default=str))


def _point_id(point: dict) -> str:
    return json.dumps(point, sort_keys=True, default=str)


def spec_points(drafts: dict, prompts: pd.DataFrame, configs, prompts_per_point: int | None = None,
                **fixed) -> list[dict]:
    """The points of a grid, in run order: sampling setting, block of ``prompts_per_point`` prompts
    (default all), draft, config. ``fixed``: fields every point carries (loop, device, clock)."""
    groups: dict = {}
    for cfg in configs:
        groups.setdefault(sampling_key(cfg), []).append(cfg)
    ids = prompts["prompt_id"].tolist()
    size = len(ids) if prompts_per_point is None else prompts_per_point
    if size < 1:
        raise ValueError(f"prompts_per_point={prompts_per_point} must be >= 1 (or None for all prompts)")
    blocks = [ids[i: i + size] for i in range(0, len(ids), size)]
    return [{"draft": name, "draft_key": _draft_key(name, d), "config": cfg.to_row(), "prompts": block, **fixed}
            for group in groups.values() for block in blocks for name, d in drafts.items() for cfg in group]


def run_spec_sweep(target, drafts: dict, prompts: pd.DataFrame, configs, *, name: str | None = None,
                   root=None, prompts_per_point: int | None = None, runner_factory=None, stop_token_ids=(),
                   clock=None, loop: str = "auto", seed: int = 0, provenance: dict | None = None) -> pd.DataFrame:
    """:func:`workbench.spec.run.run_spec` over a grid, one results-store point at a time.

    Args:
        target, drafts, prompts, configs, runner_factory, stop_token_ids, clock, loop: as ``run_spec``
            (``drafts`` values may be ``(module, info)`` from ``make_draft``; ``info["draft_key"]``
            then identifies the draft in the point keys).
        name: results-store name; ``None`` runs every point without the store.
        root: results-store folder (default ``workbench.results.results_dir()``).
        prompts_per_point: prompts per point (default all): smaller blocks resume at a finer grain.
        seed: recorded in the provenance. provenance: replaces the collected provenance (its
            ``"data"`` should identify the prompts, see :func:`prompts_identity`).

    Returns:
        The ``run_spec`` rows of every point of this grid (finished now or earlier), with columns
        ``point_id`` (the point's JSON key) and, when stored, the store's own columns. Raises
        ``ValueError`` as ``run_spec`` and ``SpecConfig`` do.
    """
    configs = [configs] if isinstance(configs, SpecConfig) else list(configs)
    t_run, d_runs = default_runners(target, drafts, prompts, configs, runner_factory, loop)
    clock_name = getattr(clock or time.perf_counter, "__name__", str(clock))
    points = spec_points(drafts, prompts, configs, prompts_per_point, loop=loop, device=str(t_run.device),
                         clock=clock_name)
    cache = SpecCache(max_baselines=prompts_per_point or len(prompts))
    by_id = prompts.set_index("prompt_id", drop=False)

    def fn(point: dict) -> pd.DataFrame:
        block = by_id.loc[point["prompts"]].reset_index(drop=True)
        rows = run_spec(t_run, {point["draft"]: d_runs[point["draft"]]}, block, [SpecConfig(**point["config"])],
                        stop_token_ids=stop_token_ids, clock=clock, loop=loop, cache=cache)
        return rows.assign(point_id=_point_id(point))

    if name is None:
        return pd.concat([fn(p) for p in points], ignore_index=True)
    if provenance is None:
        model = target if isinstance(target, torch.nn.Module) else None
        provenance = collect_provenance(model, seed=seed, data=prompts_identity(prompts, stop_token_ids))
    out = sweep(name, points, fn, provenance=provenance, **({} if root is None else {"root": root}))
    wanted = {_point_id(p) for p in points}
    return out[out["point_id"].isin(wanted)].reset_index(drop=True)


__all__ = ["prompts_identity", "run_spec_sweep", "spec_points"]
