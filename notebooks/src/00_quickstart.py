# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 · Quickstart: the default model, a generated answer, and MMLU in lm-eval's two formulations
#
# This notebook loads the workbench's built-in model (SmolLM2-135M-Instruct, offline from a GGUF copy
# when the hub is out of reach), asks it a question, and scores it on a stratified sample of MMLU
# test questions (Hendrycks et al. 2021) exactly as lm-eval does (the tests check it question by
# question against lm-eval itself), in two formulations:
#
# * **`mmlu`** (lm-eval's default): the question with lettered choices, *"Answer:"*, and the answer
#   letter chosen by log-likelihood. A 135M model cannot do this format: it scores at chance.
# * **`mmlu_continuation`** (cloze): *"Question: ...\nAnswer:"* and each choice's own text scored as
#   the continuation; `acc` takes the highest log-likelihood, `acc_norm` the highest per character.
#   A small model can score above chance here, so a quantization drop can show.
#
# Every figure comes with chance level (0.25) and says where its 95% interval includes chance: such a
# score is no evidence of anything above guessing, and two of them cannot show a drop. Every point is
# saved under `data/results/` with its provenance; re-running skips the points already there for the
# same weights and questions (other weights or questions are scored anew).

# %% tags=["parameters"]
import os

from workbench.eval.mmlu import demo_n_per_subject

MODEL = os.getenv("WB_MODEL", "smollm2-135m")  # built-in name, HF id, local folder or .gguf
DEVICE = os.getenv("WB_DEVICE", "auto")  # auto (CUDA when present, else CPU) | cpu | cuda | cuda:N
FULL = os.getenv("WB_FULL", "0") not in ("", "0", "false", "False")  # full study: 10 per subject, shots 0-5
# per subject, x 57 subjects: the demo 4 on CUDA (228 questions), 2 on the CPU (114)
N_PER_SUBJECT = int(os.getenv("WB_N_PER_SUBJECT", 10 if FULL else demo_n_per_subject(DEVICE)))
# runs as formulation:shots; the demo: letters 0-shot, cloze 5-shot (~3.5 min on 2 CPU cores)
RUNS = os.getenv("WB_MMLU_RUNS", ",".join(f"{f}:{k}" for f in ("mmlu", "mmlu_continuation") for k in range(6))
                 if FULL else "mmlu:0,mmlu_continuation:5")
RUNS = [(r.split(":")[0], int(r.split(":")[1])) for r in RUNS.split(",")]
SUBJECTS = os.getenv("WB_SUBJECTS") or None  # comma-separated subset, or None for all 57
BATCH_SIZE = int(os.getenv("WB_BATCH_SIZE", 8))
SEED = 0
DTYPE = os.getenv("WB_DTYPE", "auto")  # auto = bfloat16 on CUDA, float32 on the CPU | float32 | bfloat16
if os.getenv("WB_SMOKE", "0") not in ("", "0", "false", "False"):  # CI: a few questions, a few subjects
    N_PER_SUBJECT, SUBJECTS = 2, SUBJECTS or "anatomy,astronomy,virology,marketing"

# %%
import pandas as pd
import torch

import workbench.notebook as wbn
from workbench import results
from workbench.data import load_mmlu, sample_mmlu
from workbench.device import describe, resolve
from workbench.eval.mmlu import run_mmlu, summarize_mmlu
from workbench.eval.plots import plot_mmlu_by_shots, plot_mmlu_formulations, plot_mmlu_subjects
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
# ## Score MMLU in both formulations
# A stratified sample: `N_PER_SUBJECT` questions from every subject, the same questions for every
# run. Each subject's shared token prefix is computed once and its KV cache reused (on a GPU the
# engine's batch prefill scores them; here the Hugging Face forward). `wall_s` is each run's time,
# tokenization included. The demo scores the letters 0-shot and the cloze 5-shot; `WB_FULL=1` (or
# `WB_MMLU_RUNS`) scores both at every shot count.

# %%
test = load_mmlu(split="test", subjects=SUBJECTS.split(",") if SUBJECTS else None)
dev = load_mmlu(split="dev")
questions = sample_mmlu(test, N_PER_SUBJECT, seed=SEED)
name = f"quickstart_mmlu_{MODEL.replace('/', '_')}_{len(questions)}q"
configs = [{"model": MODEL, "formulation": f, "n_shot": k, "n_per_subject": N_PER_SUBJECT, "subjects": SUBJECTS,
            "seed": SEED} for f, k in RUNS]
data = {"mmlu_test": results.data_digest(questions), "mmlu_dev": results.data_digest(dev)}  # part of each key
prov = results.collect_provenance(model, seed=SEED, config={"runs": RUNS, "n_questions": len(questions)},
                                  data=data)
per_q = results.sweep(name, configs, lambda c: run_mmlu(model, tok, questions, dev, c["n_shot"], BATCH_SIZE,
                                                         formulation=c["formulation"]), provenance=prov)
per_q = per_q[[r in RUNS for r in zip(per_q["formulation"], per_q["n_shot"])]]
wbn.table(per_q.groupby(["formulation", "n_shot"], as_index=False)[["wall_s", "tokenize_s"]].first())

# %% [markdown]
# ## Accuracy, chance level, and whether the interval includes chance
# `acc` for both formulations, `acc_norm` too for the cloze one (for letters it equals `acc`). The
# `ci_includes_chance` column flags an accuracy that is not distinguishable from guessing.

# %%
summary = summarize_mmlu(per_q, metric=["acc", "acc_norm"])
summary = summary[(summary["metric"] == "acc") | (summary["formulation"] == "mmlu_continuation")]
table = summary[summary["subject"].isin(["micro", "macro"])]
wbn.table(table, columns=["formulation", "n_shot", "metric", "subject", "n", "acc", "ci_lo", "ci_hi", "chance",
                          "ci_includes_chance"])

# %%
plot_mmlu_formulations(summary)

# %%
many = summary.groupby("formulation")["n_shot"].nunique().max() > 1
plot_mmlu_by_shots(summary) if many else "one shot count per formulation: WB_FULL=1 scores shots 0-5"

# %% [markdown]
# ## Per-subject accuracy: pick a run
# Grey bars: the subject's interval includes chance. The menu filters the precomputed results;
# nothing is recomputed.

# %%
import ipywidgets as widgets

run = widgets.SelectionSlider(options=[(f"{f} {k}-shot", (f, k)) for f, k in RUNS], value=RUNS[-1], description="run",
                              continuous_update=False)
wbn.panel(lambda run: plot_mmlu_subjects(summary, n_shot=run[1], formulation=run[0]).show(), {"run": run}, vary="run")
