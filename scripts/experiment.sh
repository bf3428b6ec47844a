#!/usr/bin/env bash
# One experiment end to end, from a clean checkout: train (resumes if RUN exists), average the
# last checkpoints, export a SavedModel, evaluate it with sacreBLEU, write the results file.
#
#   scripts/experiment.sh CONFIG RUN MODEL SRC REF RESULTS [train overrides...]
#
# Long: run it under nohup with a log; rerunning after a kill resumes training where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=$1 RUN=$2 MODEL=$3 SRC=$4 REF=$5 RESULTS=$6
shift 6
AVERAGE_LAST=${AVERAGE_LAST:-5}
AVERAGE_CANDIDATES=${AVERAGE_CANDIDATES:-1 2 3 5}  # the averages scored on val
EXPORT_DTYPE=${EXPORT_DTYPE:-float32}  # or bfloat16 (results/benchmarks.md)
PY=${PYTHON:-python}

keras-transformer train --config "$CONFIG" --run "$RUN" "$@"
if [ -n "${VAL_SRC:-}" ]; then  # choose how many checkpoints to average on validation BLEU
  keras-transformer average --run "$RUN" --choose-on-val --src "$VAL_SRC" --ref "$VAL_REF" \
    --candidates $AVERAGE_CANDIDATES
else
  keras-transformer average --run "$RUN" --last "$AVERAGE_LAST"
fi
keras-transformer export --run "$RUN" --weights averaged --output "$MODEL" --dtype "$EXPORT_DTYPE"
keras-transformer evaluate --model "$MODEL" --src "$SRC" --ref "$REF" --lowercase \
  --output "$RUN/test.hyp" | tee "$RUN/evaluate.txt"
"$PY" scripts/report.py --run "$RUN" --model "$MODEL" --config "$CONFIG" --src "$SRC" --ref "$REF" \
  --hypotheses "$RUN/test.hyp" --output "$RESULTS" --overrides "$@"
