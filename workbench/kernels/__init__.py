"""Fused GPU kernels (Triton) used by :mod:`workbench.engine` on CUDA.

* :mod:`~workbench.kernels.gemv` -- one-row bf16 GEMV with RMSNorm / SwiGLU prologue, residual epilogue,
  and the qkv variant with bias + RoPE + KV-cache write (decode at batch 1);
* :mod:`~workbench.kernels.attention` -- split-KV decode attention over the static cache;
* :mod:`~workbench.kernels.w4a16` -- INT4 (W4A16) GEMV for 1..4 rows;
* :mod:`~workbench.kernels.fused` -- add+RMSNorm, RoPE + KV write, SiLU*up for the multi-row steps;
* :mod:`~workbench.kernels.timing` -- CUDA-graph timing for tuning.

Each kernel has a plain-torch reference (:mod:`workbench.engine.ops`, or a ``reference`` function in
its module); the engine uses the reference on CPU and the kernel on CUDA, and tests run the kernels
through Triton's CPU interpreter against them. On Hopper the kernels launch with programmatic dependent
launch (``WB_PDL=0`` turns it off).
"""
