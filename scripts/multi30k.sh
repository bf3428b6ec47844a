#!/usr/bin/env bash
# Multi30k en->de: the ~90-minute CPU run of configs/multi30k.yaml, evaluated on test_2016_flickr
# with beam 4 / alpha 0.6. Writes results/multi30k_en_de.md.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${KT_DATA_DIR:-$(cd .. && pwd)/shared/data}
export VAL_SRC=${VAL_SRC:-$DATA/multi30k/val.en} VAL_REF=${VAL_REF:-$DATA/multi30k/val.de}
exec scripts/experiment.sh configs/multi30k.yaml runs/multi30k saved_models/multi30k_en_de \
  "$DATA/multi30k/test_2016_flickr.en" "$DATA/multi30k/test_2016_flickr.de" results/multi30k_en_de.md "$@"
