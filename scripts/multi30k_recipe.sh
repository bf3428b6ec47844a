#!/usr/bin/env bash
# Multi30k en->de, issue 20's recipe: the ~90-minute CPU run of configs/multi30k_recipe.yaml,
# the checkpoint average chosen on val, evaluated on test_2016_flickr with the config's search:
# beam 4, alpha 2.0, chosen on val across runs (scripts/search_sweep.py, results/search_default.md).
# Writes results/multi30k_recipe.md.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${KT_DATA_DIR:-$(cd .. && pwd)/shared/data}
export VAL_SRC=${VAL_SRC:-$DATA/multi30k/val.en} VAL_REF=${VAL_REF:-$DATA/multi30k/val.de}
export AVERAGE_CANDIDATES=${AVERAGE_CANDIDATES:-1 2 3 5 8}
exec scripts/experiment.sh configs/multi30k_recipe.yaml runs/multi30k_recipe \
  saved_models/multi30k_recipe "$DATA/multi30k/test_2016_flickr.en" \
  "$DATA/multi30k/test_2016_flickr.de" results/multi30k_recipe.md "$@"
