#!/usr/bin/env bash
# A lent GPU over consecutive device calls: carry the built-in model, the shared data and the Jupyter wheels in
# chunks (the device tool carries at most 64 MiB a call, the repository included), then run benchmarks and the
# notebooks headless (WB_DEVICE=cuda, demo sizes) in the prepared environment.
#
# Here, once:   bash benchmarks/gpu_session.sh pack [chunk_mb]    -> .stage/1 .. .stage/N (git-ignored)
#   packs ~/.cache/workbench/gguf/SmolLM2-135M-Instruct.Q4_1.gguf, ../shared/data (xz) and the Jupyter wheels of
#   the pins for Python 3.12 into one tar, split into chunks of chunk_mb (default 26) MB.
# On the device, one call right after the other (the machine stays warm 30 s between calls):
#   call k (carry .stage/k):  bash benchmarks/gpu_session.sh stage k [command...]
#   last chunk's call:        bash benchmarks/gpu_session.sh stage N bash benchmarks/gpu_session.sh prep [command...]
#   later calls:              bash benchmarks/gpu_session.sh run [command...]
#   the notebooks:            bash benchmarks/gpu_session.sh notebooks [notebook...]   (default: all five)
# `stage` keeps its chunk outside the repo, `prep` assembles and unpacks everything and installs the wheels; each
# then runs the optional command in the prepared environment (exports below), so no call is spent idle.
set -euo pipefail
mode=${1:-run}; shift || true
S=/tmp/wbstage
export PYTHONPATH=/tmp/site:$PWD:${PYTHONPATH:-} WORKBENCH_CACHE=/tmp/wbcache WORKBENCH_SHARED_DATA=$S/data
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export WB_DEVICE=${WB_DEVICE:-cuda} WORKBENCH_RESULTS=/tmp/wbresults WORKBENCH_PLOTLY_RENDERER=plotly_mimetype
WHEELS="nbclient==0.11.0 nbformat==5.11.1 jupyter_client==8.10.0 jupyter_core==5.9.1 ipykernel==6.31.0 ipython==9.18.1
  traitlets==5.16.1 pyzmq==27.3.0 tornado==6.6.1 comm==0.2.3 plotly==7.1.0 narwhals==2.29.0 ipywidgets==8.1.9
  jupyterlab_widgets==3.0.17 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0
  rpds-py==2026.9.1 attrs==26.1.0 fastjsonschema==2.22.3 prompt_toolkit==3.0.53 wcwidth==0.9.4 stack-data==0.6.3
  executing==2.3.0 asttokens==3.0.2 pure_eval==0.2.4 platformdirs==4.14.8 gguf==0.19.0 debugpy==1.8.22
  matplotlib-inline==0.2.2 pexpect==4.9.0 ptyprocess==0.7.0 ipython_pygments_lexers==1.1.1"
case "$mode" in
  pack)
    mb=${1:-26}; shift || true; t=$(mktemp -d); mkdir -p "$t/pack/whl" "$t/pack/gguf"
    cp ~/.cache/workbench/gguf/SmolLM2-135M-Instruct.Q4_1.gguf "$t/pack/gguf/"
    tar -C ../shared -cJf "$t/pack/data.tar.xz" data
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      --platform manylinux1_x86_64 --platform any -d "$t/pack/whl" $WHEELS
    tar -C "$t" -cf "$t/all.tar" pack && rm -rf .stage && mkdir -p .stage
    split -b "${mb}000000" -d -a 1 "$t/all.tar" "$t/chunk_"
    n=0; for c in "$t"/chunk_*; do n=$((n + 1)); mkdir -p .stage/$n; mv "$c" .stage/$n/; done
    sha256sum "$t/all.tar" | cut -d' ' -f1 > .stage/$n/all.sha256; rm -rf "$t"; du -sh .stage/* ;;
  stage)
    k=${1:?stage needs the chunk number}; shift; mkdir -p $S && cp .stage/$k/* $S/ && ls -la $S ;;
  prep)
    cat $S/chunk_* > $S/all.tar && echo "$(cat $S/all.sha256)  $S/all.tar" | sha256sum -c
    tar -C $S -xf $S/all.tar && tar -C $S -xJf $S/pack/data.tar.xz
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $S/pack/whl/*.whl
    mkdir -p /tmp/wbcache/gguf && cp $S/pack/gguf/*.gguf /tmp/wbcache/gguf/
    python3 -m ipykernel install --user >/dev/null
    python3 -c "import torch, pandas, pyarrow, scipy, plotly, nbclient; print('ready', torch.__version__, torch.cuda.get_device_name())" ;;
  run) ;;
  notebooks)  # each notebook headless in a fresh kernel, timed: the executed copies, notebook_times.json, reports.log
    out=${OUT:-/tmp/wbout}; mkdir -p "$out"; nbs=("$@"); set --
    [ ${#nbs[@]} -gt 0 ] || nbs=(notebooks/[0-9][0-9]_*.ipynb)
    python3 -m benchmarks.run_notebooks --out "$out" "${nbs[@]}" 2>&1 | tee -a "$out/reports.log" ;;  # fails if one does
  *) echo "mode must be pack, stage, prep, run or notebooks, not $mode" >&2; exit 2 ;;
esac
if [ $# -gt 0 ]; then "$@"; fi
