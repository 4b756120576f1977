"""The fused one-row decode path against HF on the GPU: batch-1 decode steps through the captured graphs,
fused GEMVs on and off, each compared with HF's forward on the same weights (relative L2 error of the
logits, and argmax agreement). ``check_gpu.check_engine`` decodes 4 rows at once, which is the unfused
path; this covers the one-row path. Small perturbed config, then random-init Qwen2-7B.

Run: ``python3 -m benchmarks.check_fused`` (~1-2 min on the H200). Writes ``$OUT/check_fused.json``.
"""

from __future__ import annotations

import torch

from benchmarks.check_gpu import SMALL, rel
from benchmarks.common import CONFIGS, DEVICE, Recorder, environment, hf_model
from workbench.engine import Engine


@torch.no_grad()
def compare(m, n_prompt: int = 24, n_steps: int = 8) -> dict:
    ids = torch.randint(100, 1000, (1, n_prompt + n_steps), device=DEVICE)
    ref = m(ids).logits.float()[0, n_prompt:]  # [n_steps, V]
    eng = Engine.from_hf(m, max_batch=1, max_seq=n_prompt + n_steps + 8)
    out = {}
    for on in (True, False):
        used = eng.set_fused_gemv(on)
        eng.reset()
        eng.extend_batch([0], ids[:, :n_prompt])
        got = torch.cat([eng.extend_batch([0], ids[:, i:i + 1])[0] for i in range(n_prompt, n_prompt + n_steps)])
        tag = "fused" if used else "unfused"
        out[f"{tag}_vs_hf"] = rel(got, ref)
        out[f"{tag}_argmax_agree"] = float((got.argmax(-1) == ref.argmax(-1)).float().mean())
    return out


@torch.no_grad()
def main():
    rec = Recorder(name="check_fused.json")
    rec.put("env", environment())
    torch.manual_seed(0)
    m = hf_model(SMALL)
    for p in m.parameters():  # HF zero-inits biases: perturb so the bias path is checked
        p.add_(torch.randn_like(p) * 0.02)
    rec.put("small", compare(m))
    del m
    rec.put("qwen2-7b", compare(hf_model(CONFIGS["qwen2-7b"])))


if __name__ == "__main__":
    main()
