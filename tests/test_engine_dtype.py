import torch

from workbench.device import cpu_has_bf16, engine_dtype


def test_cpu_has_bf16_reads_the_flags_line():
    assert cpu_has_bf16("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 avx512_vnni\n")
    assert cpu_has_bf16("flags\t: fpu amx_bf16 amx_tile\n")
    assert not cpu_has_bf16("flags\t: fpu sse avx2 avx512f\nbugs\t: avx512_bf16\n")  # only the flags line counts
    assert not cpu_has_bf16("")


def test_engine_dtype_auto_and_explicit(monkeypatch):
    import workbench.device as d

    assert engine_dtype("float32", "cpu") == torch.float32
    assert engine_dtype("bf16", "cpu") == torch.bfloat16
    monkeypatch.setattr(d, "cpu_has_bf16", lambda cpuinfo=None: False)
    assert engine_dtype("auto", "cpu") == torch.float32
    monkeypatch.setattr(d, "cpu_has_bf16", lambda cpuinfo=None: True)
    assert engine_dtype(None, "cpu") == torch.bfloat16
