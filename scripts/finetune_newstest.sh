#!/usr/bin/env bash
# Fine-tune a trained Multi30k model on newstest2013 and measure newstest2014 and Multi30k test
# before and after (CTranslate2 exports, beam 4; results/finetune_newstest.md).
#
#   scripts/finetune_newstest.sh BASE_RUN FINE_TUNED_RUN [train overrides...]
#
# Rerunning after a kill resumes the fine-tuning run where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=$1 RUN=$2
shift 2
DATA=${KT_DATA_DIR:-../shared/data}
EVAL=$RUN-eval
PY=${PYTHON:-python}
mkdir -p "$EVAL"

translate_tests() {  # NAME RUN: export, then translate both test sets
  keras-transformer export --run "$2" --output "$EVAL/$1-ct2" --format ctranslate2
  keras-transformer translate --model "$EVAL/$1-ct2" \
    --input "$DATA/wmt14_en_de/newstest2014.en" --output "$EVAL/$1.newstest2014.de"
  keras-transformer translate --model "$EVAL/$1-ct2" \
    --input "$DATA/multi30k/test_2016_flickr.en" --output "$EVAL/$1.test_2016_flickr.de"
}

[ -s "$EVAL/before.test_2016_flickr.de" ] || translate_tests before "$BASE"
keras-transformer train --config configs/finetune_newstest.yaml --run "$RUN" --init-from "$BASE" "$@"
translate_tests after "$RUN"
"$PY" scripts/finetune_report.py --base "$BASE" --run "$RUN" --translations "$EVAL" \
  --output results/finetune_newstest.md --command "scripts/finetune_newstest.sh $BASE $RUN $*"
