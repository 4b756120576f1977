"""The execution backends a study runs on: the workbench's own engine (in process) or vLLM (out of process).

A study's ``run(config, *, model, data, engine, store)`` takes ``engine`` as a name (``"workbench"``,
``"vllm"``) or a backend object; :func:`resolve_engine` turns it into one with

* ``name``: ``"workbench"`` or ``"vllm"``, the ``engine`` column of every row;
* ``in_process``: the workbench engine runs on the model object in this process; vLLM is a separate program
  (``.venv-vllm``: its OpenAI server, ``/metrics``, ``vllm bench serve``, or a script run by its Python), so it
  takes a model folder on disk, never the module;
* ``provenance()``: a JSON-able dict that identifies the backend's behaviour (for the workbench engine its
  :class:`~workbench.engine.EngineConfig`: the kernels it may choose; for vLLM its version and flags). It goes
  into every point's provenance and, through ``engine_key``, into the results key
  (:func:`workbench.results.identity`): a point timed on other kernels or another engine is never reused.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from workbench.registry import Registry

__all__ = ["ENGINES", "Backend", "WorkbenchEngine", "resolve_engine"]


@runtime_checkable
class Backend(Protocol):
    """What a study needs to know of its execution backend (see the module docstring)."""

    name: str
    in_process: bool

    def provenance(self) -> dict: ...


def _engine_config_dict(cfg: Any) -> dict:
    if cfg is None:
        return {}
    if hasattr(cfg, "to_dict"):
        return cfg.to_dict()
    from dataclasses import asdict, is_dataclass

    return asdict(cfg) if is_dataclass(cfg) else dict(cfg)


@dataclass(frozen=True)
class WorkbenchEngine:
    """The workbench's own engine (:class:`workbench.engine.Engine`), in this process, on the model's device.

    ``config``: the engine's kernel settings (a :class:`workbench.engine.EngineConfig`; ``None``: the defaults,
    with ``WORKBENCH_DISABLED_KERNELS`` applied, read when the backend is made). ``route_key``: the engine's
    :meth:`~workbench.engine.Engine.route_key` once a study has built one (set by the study; ``None`` before)."""

    config: Any = None
    route_key: str | None = None
    name: str = field(default="workbench", init=False)
    in_process: bool = field(default=True, init=False)

    def __post_init__(self):
        if self.config is None:
            from workbench.engine import EngineConfig

            object.__setattr__(self, "config", EngineConfig.from_env())

    def engine_config(self):
        """The :class:`~workbench.engine.EngineConfig` engines of this backend are built with."""
        return self.config

    def provenance(self) -> dict:
        """``name``, ``engine_config`` (``EngineConfig.to_dict()``: the kernels routing may choose) and, where
        known, ``route_key``: all of it goes into ``engine_key``, so a timing made with other kernels is not
        reused."""
        out = {"name": self.name, "engine_config": _engine_config_dict(self.engine_config())}
        if self.route_key:
            out["route_key"] = self.route_key
        return out


def _vllm(**kwargs):
    """The vLLM backend (:class:`workbench.studies.vllm_backend.VLLMEngine`: out of process, ``.venv-vllm``)."""
    from workbench.studies.vllm_backend import VLLMEngine

    return VLLMEngine(**kwargs)


ENGINES: Registry = Registry("engine", {"workbench": WorkbenchEngine, "vllm": _vllm}, case_sensitive=False)


def resolve_engine(engine: str | Backend | None = "workbench") -> Backend:
    """The backend for ``engine``: a name in :data:`ENGINES` (``None``: ``"workbench"``) or a :class:`Backend`
    object, returned as is. Raises ``ValueError`` for an unknown name (with "did you mean"), or, for ``"vllm"``
    where ``.venv-vllm`` is missing, naming the fix (``make setup-vllm``)."""
    if engine is None:
        engine = "workbench"
    if isinstance(engine, str):
        backend = ENGINES.lookup(engine.strip(), "Pass engine='workbench' (in process) or 'vllm' (.venv-vllm).")()
    else:
        backend = engine
    if not isinstance(backend, Backend):
        raise TypeError(f"engine={engine!r} is neither an engine name {ENGINES.names()} nor a backend (an object "
                        "with name, in_process and provenance())")
    check = getattr(backend, "available", None)
    if callable(check):
        ok, why = check()
        if not ok:
            raise ValueError(f"engine {backend.name!r} is not available here: {why}")
    return backend
