"""Runners: the single place every timing goes through (see :mod:`workbench.engine.api`)."""

from workbench.engine.api import BatchRunner, Runner
from workbench.engine.hf_runner import HFRunner

__all__ = ["BatchRunner", "HFRunner", "Runner"]
