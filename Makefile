# Two commands for a new user (each sets itself up: creates .venv if missing, installs the pins):
#   make reports   execute every notebook headless on the built-in model -> reports/*.ipynb + *.html
#   make test      unit and cross-check tests, plus every notebook under nbmake at smoke sizes
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.workbench-installed
NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb))
export HF_HUB_OFFLINE ?= 0
export TOKENIZERS_PARALLELISM := false

.PHONY: setup reports test test-fast lint clean-reports

setup: $(STAMP)

$(STAMP): requirements/cpu.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements/cpu.txt
	$(PY) -m pip install --quiet --no-deps -e .
	@touch $(STAMP)

reports: $(STAMP)
	@mkdir -p reports
	@set -e; for nb in $(NOTEBOOKS); do \
	  echo "== $$nb"; start=$$(date +%s); \
	  $(PY) -m nbconvert --to notebook --execute --ExecutePreprocessor.timeout=7200 \
	      --output-dir reports "$$nb"; \
	  $(PY) -m nbconvert --to html --output-dir reports "reports/$$(basename $$nb)"; \
	  echo "   $$nb took $$(( $$(date +%s) - start )) s"; \
	done
	@echo "reports written to reports/"

# Tests run offline, one torch thread (tests/conftest.py); notebooks at smoke sizes (WB_SMOKE=1).
# Headless kernels were seen to stall now and then on a busy 2-core machine (kernel idle, client still
# waiting); the notebook runs here keep IOPub traffic small (no embedded plotly.js, progress bars
# updated every 10 s), a stalled cell times out after 300 s (smoke cells take well under a minute), any test item is stopped after 25 min (pytest-timeout), and a failed item is retried twice.
test: $(STAMP)
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 WB_SMOKE=1 WORKBENCH_RESULTS=$${WORKBENCH_RESULTS:-$$(mktemp -d)} \
	  WORKBENCH_PLOTLY_RENDERER=plotly_mimetype TQDM_MININTERVAL=10 HF_HUB_DISABLE_PROGRESS_BARS=1 \
	  $(PY) -m pytest tests --nbmake notebooks --nbmake-timeout=300 --timeout=1500 --reruns 2 -p no:cacheprovider $(PYTEST_ARGS)

test-fast: $(STAMP)
	HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 $(PY) -m pytest tests -m "not slow and not reference" $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check workbench tests benchmarks

clean-reports:
	rm -rf reports
