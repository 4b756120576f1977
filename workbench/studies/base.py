"""What every study shares: sizes, the placement, the model argument, provenance and the results store.

The shape of a study (DESIGN.md "One shape per study")::

    cfg = quant.Config.from_name("demo", device="auto")            # frozen, validated, named sizes
    res = quant.run(cfg, model="smollm2-135m", data=None, engine="workbench", store=None)
    res.grid                                                        # tidy frames; plots take them

* ``size``: ``"smoke"`` (CI, minutes), ``"demo"`` (``make reports``: every notebook in about 20 minutes on a
  2-core CPU, larger on CUDA), ``"full"`` (hours on a 2-core CPU). :func:`check_size` refuses anything else.
* ``model``: a :func:`workbench.models.load_model` spec (loaded on the config's device and dtype) or an already
  loaded ``(model, tokenizer)`` pair.
* ``data``: ``None`` (each study's ``load_data(config)``: ``../shared/data`` or the public datasets) or the
  study's ``Data``.
* ``engine``: ``"workbench"`` (in process) or ``"vllm"`` (out of process), or a backend object
  (:mod:`workbench.studies.engines`).
* ``store``: a :class:`Store` (``None``: the default results folder, ``$WORKBENCH_RESULTS`` or
  ``data/results``). Every finished point is stored; a re-run computes only what is missing. A study persists
  nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields, is_dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from workbench.device import Placement
from workbench.params import SIZES
from workbench.registry import Registry

__all__ = ["SIZES", "Store", "as_model", "check_size", "config_row", "presets", "provenance", "resolve_store",
           "slug"]

_SIZES: Registry = Registry("study size", dict.fromkeys(SIZES))


def check_size(size: str) -> str:
    """``size`` if it is one of :data:`SIZES`; raises ``ValueError`` with "did you mean" otherwise."""
    return _SIZES.check(size, f"Pass one of {SIZES} (notebooks: WB_SIZE).")


def presets(cls, size: str, device, table: dict[str, dict], overrides: dict) -> Any:
    """``cls`` built from ``table[size]`` (the named size's fields), the resolved ``device`` and ``overrides``;
    an override of ``None`` keeps the preset's value, so unset notebook parameters pass straight through. Raises
    ``ValueError`` for an unknown size or a field ``cls`` does not have (naming the fields it has)."""
    check_size(size)
    names = {f.name for f in fields(cls)}
    bad = sorted(set(overrides) - names)
    if bad:
        raise ValueError(f"{cls.__qualname__} has no field(s) {bad}; its fields: {sorted(names)}")
    kw = {**table[size], "size": size, "device": str(device),
          **{k: v for k, v in overrides.items() if v is not None}}
    return cls(**kw)


def as_model(model, config) -> tuple[Any, Any]:
    """``(model, tokenizer)``: a loaded pair as is, or the spec ``model`` loaded with ``config.device`` and
    ``config.dtype`` (:func:`workbench.models.load_model`). Raises ``TypeError`` for anything else."""
    if isinstance(model, tuple) and len(model) == 2:
        return model
    if isinstance(model, str):
        from workbench.models import load_model

        return load_model(model, dtype=config.dtype, device=config.device)
    raise TypeError(f"model={type(model).__name__}: pass a load_model spec (e.g. 'smollm2-135m') or the "
                    "(model, tokenizer) pair load_model returned")


def placement(config) -> Placement:
    """The :class:`~workbench.device.Placement` of a config with ``device``, ``dtype`` (and ``threads``)."""
    return Placement.resolve(config.device, config.dtype, getattr(config, "threads", None))


def config_row(config) -> dict:
    """A config's fields as scalars (tuples and nested dataclasses as strings): columns of its rows."""
    out = {}
    for k, v in (asdict(config) if is_dataclass(config) else dict(config)).items():
        out[k] = v if v is None or isinstance(v, (str, int, float, bool)) else str(v)
    return out


def slug(text: str) -> str:
    """``text`` as a results-store name part: ``/``, ``:`` and spaces become ``_``."""
    return "".join("_" if c in "/: " else c for c in str(text))


def provenance(model, config, backend, *, data: dict | None = None, seed: int | None = None, **extra) -> dict:
    """:func:`workbench.results.collect_provenance` of a study run: the model(s), the config, the data identity
    (``data``: names and :func:`~workbench.results.data_digest` values), and the backend's ``provenance()`` as
    ``engine`` (part of every point's key)."""
    from workbench.results import collect_provenance

    return collect_provenance(model, seed=seed if seed is not None else getattr(config, "seed", None),
                              config=config_row(config), data=data, engine=backend.provenance(), **extra)


@dataclass(frozen=True)
class Store:
    """A results store folder (``root``; ``None``: :func:`workbench.results.results_dir`). Its methods are those
    of :mod:`workbench.results` bound to the folder."""

    root: Path | None = None

    def sweep(self, name: str, configs: Iterable[Any], fn: Callable[[Any], pd.DataFrame | dict],
              provenance: dict | None = None, progress: bool = True) -> pd.DataFrame:
        """:func:`workbench.results.sweep` in this folder."""
        from workbench.results import sweep

        return sweep(name, configs, fn, provenance=provenance, root=self.root, progress=progress)

    def load(self, name: str, provenance: dict | None = None) -> pd.DataFrame:
        """:func:`workbench.results.load_results` from this folder."""
        from workbench.results import load_results

        return load_results(name, self.root, provenance=provenance)


def resolve_store(store) -> Store:
    """``store`` as a :class:`Store`: ``None`` the default folder, a path that folder, a :class:`Store` as is."""
    if store is None:
        return Store()
    if isinstance(store, Store):
        return store
    if isinstance(store, (str, Path)):
        return Store(Path(store))
    raise TypeError(f"store={store!r}: pass None (the default results folder), a folder path or a Store")


def with_fields(config, **changes):
    """``dataclasses.replace`` re-exported for notebooks that tweak one field of a preset."""
    return replace(config, **changes)
