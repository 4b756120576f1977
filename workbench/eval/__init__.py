"""Evaluation against ground truth (MMLU) and against the full-precision model (fidelity)."""
