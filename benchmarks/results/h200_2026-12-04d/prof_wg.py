import torch
from workbench.kernels import w4a16_mma as mm
from benchmarks.check_w4_mma import weight
dev = torch.device("cuda")
cases = [("gate_up", 37888, 3584, 64, (2, 4, 21, 8, 4)), ("gate_up", 37888, 3584, 64, (2, 2, 17, 4, 4)),
         ("o", 3584, 3584, 64, (2, 4, 21, 8, 8)), ("o", 3584, 3584, 64, (1, 2, 5, 8, 8))]
for name, n, k, m, cfg in cases:
    _q, qw, s, z = weight(n, k, 128, torch.bfloat16, dev)
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    for _ in range(2):
        mm.gemm(x, qw, s, z, 128, n, None, cfg)
    torch.cuda.synchronize()
    print(name, m, cfg, flush=True)
