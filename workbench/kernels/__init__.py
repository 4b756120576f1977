"""Fused GPU kernels (Triton) used by :mod:`workbench.engine` on CUDA.

* :mod:`~workbench.kernels.gemv` -- one-row bf16 GEMV with RMSNorm / SwiGLU prologue, residual epilogue,
  and the qkv variant with bias + RoPE + KV-cache write (decode at batch 1);
* :mod:`~workbench.kernels.rows` -- few-row (M = 1..64) tensor-core GEMMs for bf16 and INT4 (W4A16) weights
  with the same fusions (decode batches, speculative verify steps; INT4 also at M = 1);
* :mod:`~workbench.kernels.w4a16` -- the CUDA-core INT4 GEMV for 1..4 rows (group sizes the tensor-core GEMM
  does not take); :mod:`~workbench.kernels.int4_layout` -- the INT4 weight layouts;
* :mod:`~workbench.kernels.attention` -- split-KV decode attention over the static cache;
* :mod:`~workbench.kernels.fused` -- add+RMSNorm, RoPE + KV write, SiLU*up for the unfused steps;
* :mod:`~workbench.kernels.common` -- interpreter switch, programmatic dependent launch, split-K tickets and
  the one-row store epilogue shared by the kernels above;
* :mod:`~workbench.kernels.timing` -- CUDA-graph timing for tuning; :mod:`~workbench.kernels.bandwidth` --
  read-bandwidth probes for the benchmarks' floors.

Each kernel has a plain-torch reference (:mod:`workbench.engine.ops`, or a ``reference`` function in
its module); the engine uses the reference on CPU and the kernel on CUDA, and tests run the kernels
through Triton's CPU interpreter against them (the compiled kernels on a GPU machine). Which kernel runs
each matmul of a step: :mod:`workbench.engine.dispatch`. On Hopper the kernels launch with programmatic
dependent launch (``EngineConfig(pdl=False)`` turns it off).
"""
