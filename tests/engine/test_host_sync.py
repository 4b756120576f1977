"""The engine's batch prefill and prefix copies queue their work without waiting for the device.

A host<->device synchronization per step leaves the GPU idle while the host issues the next step; the
MMLU scorer calls ``copy_prefix`` once per subject per step and ``extend_batch`` with new ``n_valid``
values every step. Checked with ``torch.cuda.set_sync_debug_mode("error")``, which raises on every
synchronizing CUDA call (a pageable ``tensor.to("cuda")`` syncs the stream after its copy). CUDA only."""

import pytest
import torch

from workbench.engine import Engine

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="host/device synchronization is a CUDA matter")

TINY = {"model_type": "qwen2", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256}


def test_prefix_copy_and_ragged_prefill_do_not_sync():
    eng = Engine.from_config(TINY, max_batch=8, max_seq=128, device="cuda", dtype=torch.bfloat16, seed=0,
                             use_graphs=False)
    prefix = torch.randint(0, 256, (1, 20), device="cuda")
    eng.extend_batch([7], prefix, logits="last")  # warm-up (library handles, kernel compilation)
    eng.copy_prefix(7, [0, 1], 20)
    eng.extend_batch([0, 1], torch.randint(0, 256, (2, 6), device="cuda"), torch.tensor([6, 3]), logits="last")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for step, rows in enumerate(([0, 1, 2], [3, 4], [0, 2, 4, 5])):
            eng.copy_prefix(7, rows, 20)
            n_valid = torch.tensor([5 + step + r for r in range(len(rows))])  # new values: not memoised yet
            eng.extend_batch(rows, torch.randint(0, 256, (len(rows), 12), device="cuda"), n_valid, logits="last")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert eng.lengths()[[0, 2, 4, 5]].tolist() == [20 + 7 + r for r in range(4)]


def test_speculative_verify_step_and_rollback_do_not_sync():
    # a verify step (graph replay of T = k + 1 tokens) and the rollback of its rejected tokens (truncate_slot) every
    # round: `_len_dev[slot] = length` copied the length from pageable host memory, a sync per round
    eng = Engine.from_config(TINY, max_batch=2, max_seq=128, device="cuda", dtype=torch.bfloat16, seed=0)
    eng.extend_batch([0], torch.randint(0, 256, (1, 16), device="cuda"), logits="last")
    toks = torch.randint(0, 256, (1, 5), device="cuda")
    for _ in range(2):  # capture the graph of this shape
        eng.extend_batch([0], toks)
        eng.truncate_slot(0, 16)
    kv = eng.read_slot_kv(0, 16)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for keep in (16, 18, 17):
            eng.extend_batch([0], toks)
            eng.truncate_slot(0, keep)
            eng.truncate_slot(0, 16)
        eng.write_slot_kv(1, kv)  # a transferred prompt (P/D) sets the length the same way
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert eng.lengths().tolist() == [16, 16] and eng._len_dev.tolist() == [16, 16]
