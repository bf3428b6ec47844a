#!/usr/bin/env bash
# Tatoeba en->es with configs/tatoeba_en_es.yaml, evaluated on its test split.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${KT_DATA_DIR:-$(cd .. && pwd)/shared/data}
export VAL_SRC=${VAL_SRC:-$DATA/tatoeba_spa_eng/val.en} VAL_REF=${VAL_REF:-$DATA/tatoeba_spa_eng/val.es}
exec scripts/experiment.sh configs/tatoeba_en_es.yaml runs/tatoeba_en_es saved_models/tatoeba_en_es \
  "$DATA/tatoeba_spa_eng/test.en" "$DATA/tatoeba_spa_eng/test.es" results/tatoeba_en_es.md "$@"
