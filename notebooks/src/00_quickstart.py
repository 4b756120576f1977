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
from workbench.params import env_str, study_size

SIZE = study_size()  # WB_SIZE: smoke | demo | full (WB_SMOKE=1 / WB_FULL=1 also work); the sizes: mmlu.Config.from_name
MODEL = env_str("WB_MODEL", "smollm2-135m")  # built-in name, HF id, local folder or .gguf
DEVICE = env_str("WB_DEVICE", "auto")  # auto (CUDA when present, else CPU) | cpu | cuda | cuda:N
DTYPE = env_str("WB_DTYPE", "auto")  # auto = bfloat16 on CUDA, float32 on the CPU | float32 | bfloat16
ENGINE = env_str("WB_ENGINE", "workbench", choices=("workbench", "vllm"))  # vllm: needs `make setup-vllm`
SUBJECTS = env_str("WB_SUBJECTS", None)  # comma-separated subset of the 57 subjects, or all

# %%
import pandas as pd
from IPython.display import display

import workbench.notebook as wbn
from workbench.eval.plots import plot_mmlu_by_shots, plot_mmlu_formulations, plot_mmlu_subjects
from workbench.models import load_model, provenance_of
from workbench.studies import mmlu
from workbench.studies.compare import paired_difference, side_by_side

wbn.setup()
cfg = mmlu.Config.from_name(SIZE, device=DEVICE, dtype=DTYPE, subjects=SUBJECTS)
print(cfg)

# %% [markdown]
# ## Load the model
# `provenance_of` says where the weights came from. The offline copy is the Q4_1 GGUF dequantized to
# float32, so it is a 4-bit-rounded version of the original bf16 weights; expect slightly lower
# scores than the published ones.

# %%
model, tok = load_model(MODEL, dtype=cfg.dtype, device=cfg.device)
wbn.table(pd.Series(provenance_of(model), name="value"), max_chars=60)

# %%
msgs = [{"role": "user", "content": "In one sentence, why does speculative decoding speed up inference?"}]
ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True).to(model.device)
out = model.generate(**ids, max_new_tokens=48, do_sample=False)
print(tok.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True))

# %% [markdown]
# ## Score MMLU in both formulations
# A stratified sample: `cfg.n_per_subject` questions from every subject, the same questions for every
# run. Each subject's shared token prefix is computed once and its KV cache reused (on a GPU the
# engine's batch prefill scores them; here the Hugging Face forward). `wall_s` is each run's time,
# tokenization included. The demo scores the letters 0-shot and the cloze 5-shot; `WB_SIZE=full` scores both at
# every shot count.

# %%
res = mmlu.run(cfg, model=(model, tok), engine=ENGINE)
times = [c for c in ("wall_s", "tokenize_s") if c in res.per_question]  # (vLLM's rows have no tokenize_s)
wbn.table(res.per_question.groupby(["formulation", "n_shot"], as_index=False)[times].first())

# %% [markdown]
# ### The same questions on both engines (`WB_ENGINE=vllm`)
# With `WB_ENGINE=vllm` the study above ran on vLLM (`.venv-vllm`, its prompt log-probs of the same lm-eval token
# pairs); the workbench scores the same questions here and the two are joined per question, with the differences
# computed (`workbench.studies.compare`): per-choice log-likelihood differences, and the paired difference in
# accuracy with its 95% interval.

# %%
if ENGINE == "vllm":
    ref = mmlu.run(cfg, model=(model, tok), engine="workbench")
    frames = {"workbench": ref.per_question, "vllm": res.per_question}
    sbs = side_by_side(frames, on=["qid", "formulation", "n_shot"], metrics=["correct", "logprob_A", "logprob_B"])
    display(wbn.table(sbs.describe().T), paired_difference(ref.per_question["correct"].astype(float),
                                                          res.per_question["correct"].astype(float)))
else:
    print("one engine here (WB_ENGINE=workbench); WB_ENGINE=vllm adds vLLM beside it (needs `make setup-vllm`)")

# %% [markdown]
# ## Accuracy, chance level, and whether the interval includes chance
# `acc` for both formulations, `acc_norm` too for the cloze one (for letters it equals `acc`). The
# `ci_includes_chance` column flags an accuracy that is not distinguishable from guessing.

# %%
summary = res.summary
wbn.table(res.headline(), columns=["formulation", "n_shot", "metric", "subject", "n", "acc", "ci_lo", "ci_hi", "chance",
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

run = widgets.SelectionSlider(options=[(f"{f} {k}-shot", (f, k)) for f, k in cfg.runs], value=cfg.runs[-1],
                              description="run",
                              continuous_update=False)
wbn.panel(lambda run: plot_mmlu_subjects(summary, n_shot=run[1], formulation=run[0]).show(), {"run": run}, vary="run")
