#!/usr/bin/env bash
# The main job in minutes: train a small model on Multi30k en->de (5 minutes), export a
# SavedModel with the tokenizer inside, and translate a few test sentences with it.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${KT_DATA_DIR:-$(cd .. && pwd)/shared/data}
export KT_DATA_DIR=$DATA
keras-transformer train --config configs/quickstart.yaml --run runs/quickstart "$@"
keras-transformer export --run runs/quickstart --output saved_models/quickstart
head -n 5 "$DATA/multi30k/test_2016_flickr.en" | tee /dev/stderr | keras-transformer translate --model saved_models/quickstart
