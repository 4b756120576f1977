"""H200 benchmarks of the engine (run as modules from the repo root: ``python -m benchmarks.run_all``)."""
