"""Benchmark scripts, run as modules from the repo root (``python -m benchmarks.engine_table``); each calls the
package and writes raw files with their provenance (benchmarks/results/)."""
