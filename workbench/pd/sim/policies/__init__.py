"""Serving policies by name: a small explicit registry (one file per policy, as Vidur's
``scheduler/replica_scheduler/*``). Each module has ``NAME`` and
``run(workload, config, costs: PoolCosts, record=False) -> dict`` of per-request arrays (``first_ms``,
``finish_ms``, ``n_preempt``, ``n_tokens``, ``instance``; times in ms)."""

from __future__ import annotations

import importlib

from workbench.registry import Registry

__all__ = ["POLICIES", "check_policy", "get_policy"]

POLICIES: Registry[str] = Registry("SimConfig.policy", {
    "colocated": "workbench.pd.sim.policies.colocated",
    "chunked": "workbench.pd.sim.policies.chunked",
    "disaggregated": "workbench.pd.sim.policies.disaggregated",
})


def check_policy(name: str) -> None:
    """Raise ``UnknownNameError`` (a ``ValueError``) with a "did you mean" hint for an unknown policy name."""
    POLICIES.check(name)


def get_policy(name: str):
    """The policy's ``run`` function."""
    check_policy(name)
    return importlib.import_module(POLICIES[name]).run
