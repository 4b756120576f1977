#!/bin/bash
# the Makefile's `reports` loop, with the shared venv's python (make reports would pip-install into it)
cd /tmp/mr/work/main
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONPATH=/tmp/mr/work/main
PY=/work/main/.venv/bin/python
mkdir -p reports
T0=$(date +%s)
for nb in $(ls notebooks/*.ipynb | sort); do
  echo "== $nb"; start=$(date +%s)
  $PY -m nbconvert --to notebook --execute --ExecutePreprocessor.timeout=7200 --ExecutePreprocessor.store_widget_state=True --output-dir reports "$nb" || { echo "FAILED $nb"; }
  $PY -m workbench.report "reports/$(basename $nb)"
  echo "   $nb took $(( $(date +%s) - start )) s"
done
echo "EXIT 0 total $(( $(date +%s) - T0 )) s"
