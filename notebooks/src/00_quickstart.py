# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 · Quickstart: the default model, a generated answer, and MMLU 0-shot vs 5-shot
#
# This notebook loads the workbench's built-in model (SmolLM2-135M-Instruct, offline from a GGUF copy
# when the hub is out of reach), asks it a question, and scores it on a stratified sample of MMLU
# test questions (Hendrycks et al. 2021) with the standard prompt: *"The following are multiple
# choice questions (with answers) about {subject}."*, dev-split exemplars, and the answer letter
# chosen by log-likelihood, exactly as lm-eval's `mmlu` task does (the tests check it question by
# question). Every point is saved under `data/results/` with its provenance; re-running skips the
# points already there for the same weights and questions (other weights or questions are scored anew).

# %% tags=["parameters"]
import os

MODEL = os.getenv("WB_MODEL", "smollm2-135m")  # built-in name, HF id, local folder or .gguf
FULL = os.getenv("WB_FULL", "0") not in ("", "0", "false", "False")  # full study: shots 0 to 5, 570 questions
N_PER_SUBJECT = int(os.getenv("WB_N_PER_SUBJECT", 10 if FULL else 5))  # 5 x 57 subjects = 285 questions
SHOTS = [int(s) for s in os.getenv("WB_SHOTS", "0,1,2,3,4,5" if FULL else "0,5").split(",")]
SUBJECTS = os.getenv("WB_SUBJECTS") or None  # comma-separated subset, or None for all 57
BATCH_SIZE = int(os.getenv("WB_BATCH_SIZE", 8))
SEED = 0
DEVICE = os.getenv("WB_DEVICE", "auto")  # auto (CUDA when present, else CPU) | cpu | cuda | cuda:N
DTYPE = os.getenv("WB_DTYPE", "auto")  # auto = bfloat16 on CUDA, float32 on the CPU | float32 | bfloat16
if os.getenv("WB_SMOKE", "0") not in ("", "0", "false", "False"):  # CI: a few questions, a few subjects
    N_PER_SUBJECT, SHOTS, SUBJECTS = 2, [0, 5], SUBJECTS or "anatomy,astronomy,virology,marketing"

# %%
import pandas as pd
import torch

import workbench.notebook as wbn
from workbench import results
from workbench.data import load_mmlu, sample_mmlu
from workbench.device import describe, resolve
from workbench.eval.mmlu import run_mmlu, summarize_mmlu
from workbench.eval.plots import plot_mmlu_by_shots, plot_mmlu_subjects
from workbench.models import load_model, provenance_of

wbn.setup()
torch.manual_seed(SEED)
device, dtype = resolve(DEVICE, DTYPE)
print(describe(device, dtype))

# %% [markdown]
# ## Load the model
# `provenance_of` says where the weights came from. The offline copy is the Q4_1 GGUF dequantized to
# float32, so it is a 4-bit-rounded version of the original bf16 weights; expect slightly lower
# scores than the published ones.

# %%
model, tok = load_model(MODEL, dtype=dtype, device=device)
wbn.table(pd.Series(provenance_of(model), name="value"), max_chars=60)

# %%
msgs = [{"role": "user", "content": "In one sentence, why does speculative decoding speed up inference?"}]
ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
out = model.generate(**ids, max_new_tokens=48, do_sample=False)
print(tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True))

# %% [markdown]
# ## Score MMLU at several shot counts
# A stratified sample: `N_PER_SUBJECT` questions from every subject, the same questions for each
# shot count. Each subject's few-shot prefix is encoded once and its KV cache reused.

# %%
test = load_mmlu(split="test", subjects=SUBJECTS.split(",") if SUBJECTS else None)
dev = load_mmlu(split="dev")
questions = sample_mmlu(test, N_PER_SUBJECT, seed=SEED)
name = f"quickstart_mmlu_{MODEL.replace('/', '_')}_{len(questions)}q"
configs = [{"model": MODEL, "n_shot": k, "n_per_subject": N_PER_SUBJECT, "subjects": SUBJECTS, "seed": SEED}
           for k in SHOTS]
data = {"mmlu_test": results.data_digest(questions), "mmlu_dev": results.data_digest(dev)}  # part of each key
prov = results.collect_provenance(model, seed=SEED, config={"shots": SHOTS, "n_questions": len(questions)},
                                  data=data)
per_q = results.sweep(name, configs, lambda c: run_mmlu(model, tok, questions, dev, c["n_shot"], BATCH_SIZE),
                      provenance=prov)
summary = summarize_mmlu(per_q[per_q["n_shot"].isin(SHOTS)])
wbn.table(summary[summary["subject"].isin(["micro", "macro"])], columns=["n_shot", "subject", "correct", "n", "acc",
                                                                         "ci_lo", "ci_hi"])

# %%
plot_mmlu_by_shots(summary)

# %%
plot_mmlu_subjects(summary, n_shot=max(SHOTS))

# %% [markdown]
# ## Per-subject accuracy: pick the number of shots
# The slider filters the precomputed results; nothing is recomputed.

# %%
import ipywidgets as widgets

shots = widgets.SelectionSlider(options=sorted(SHOTS), value=max(SHOTS), description="shots",
                                continuous_update=False)
wbn.panel(lambda n_shot: plot_mmlu_subjects(summary, n_shot=n_shot).show(), {"n_shot": shots}, vary="n_shot")
