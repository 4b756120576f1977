"""Fused GPU kernels (Triton) used by :mod:`workbench.engine` on CUDA.

Each kernel has a plain-torch reference in :mod:`workbench.engine.ops` with the same signature; the
engine uses the reference on CPU and the kernel on CUDA, and tests compare the two.
"""
