#!/usr/bin/env bash
# Issue 44's controlled back-translation experiment on Multi30k en->de, as the literature runs it
# (Edunov et al. 2018, at this corpus's scale): split train into halves A and B; train de->en on A;
# back-translate B's German with beam search and with sampling; train en->de on A alone, on A plus
# back-translated B (beam, sampled; tagged), and on A plus the real B (the ceiling); evaluate each
# on val and test_2016_flickr. Every run: configs/multi30k_recipe.yaml, STEPS updates, one shared
# tokenizer (trained by the first run on A), exported with beam 4 / alpha 0.6.
#
#   STEPS=3000 scripts/back_translation.sh            # writes runs/bt/*, results/back_translation.txt
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${KT_DATA_DIR:-$(cd .. && pwd)/shared/data}
OUT=${OUT:-runs/bt}
STEPS=${STEPS:-3000}
KT=(keras-transformer)
M30K=$DATA/multi30k
mkdir -p "$OUT/data"
HALF=14500
for lang in en de; do
  head -n $HALF "$M30K/train.$lang" > "$OUT/data/A.$lang"
  tail -n +$((HALF + 1)) "$M30K/train.$lang" > "$OUT/data/B.$lang"
done

train() {  # train RUN SOURCE_LANG TARGET_LANG [overrides...]
  local run=$1 src=$2 tgt=$3; shift 3
  local tokenizer=()
  [ -d "$OUT/de_en/tokenizer" ] && tokenizer=("data.tokenizer=$OUT/de_en/tokenizer")
  "${KT[@]}" train --config configs/multi30k_recipe.yaml --run "$OUT/$run" \
    "data.train_source=$OUT/data/A.$src" "data.train_target=$OUT/data/A.$tgt" \
    "data.validation_source=$M30K/val.$src" "data.validation_target=$M30K/val.$tgt" \
    "training.max_steps=$STEPS" training.max_minutes=0 "${tokenizer[@]}" "$@"
  [ -d "$OUT/$run.export" ] || "${KT[@]}" export --run "$OUT/$run" --output "$OUT/$run.export" \
    --beam-size 4 --alpha 0.6
}

# 1. The reverse model and the two back-translations of B's German.
train de_en de en
[ -f "$OUT/data/B.bt_beam.en" ] || "${KT[@]}" translate --model "$OUT/de_en.export" \
  --input "$OUT/data/B.de" --output "$OUT/data/B.bt_beam.en"
[ -f "$OUT/data/B.bt_sample.en" ] || "${KT[@]}" translate --model "$OUT/de_en.export" \
  --input "$OUT/data/B.de" --output "$OUT/data/B.bt_sample.en" --sampling-topk 10 --seed 1

# 2. en->de on A, A + back-translated B (beam, sampled; tagged), A + real B.
mix() { echo "data.mix=[{source: $OUT/data/$1, target: $OUT/data/B.de, weight: 1$2}]"; }
train en_de_A en de
train en_de_bt_beam en de "$(mix B.bt_beam.en ', tag: "<BT>"')"
train en_de_bt_sample en de "$(mix B.bt_sample.en ', tag: "<BT>"')"
train en_de_real_B en de "$(mix B.en '')"

# 3. Each en->de export on val and test_2016_flickr.
{
  echo "# scripts/back_translation.sh, STEPS=$STEPS, $(date -u +%F), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  for run in en_de_A en_de_bt_beam en_de_bt_sample en_de_real_B; do
    for split in val test_2016_flickr; do
      printf '%s %s ' "$run" "$split"
      "${KT[@]}" evaluate --model "$OUT/$run.export" --src "$M30K/$split.en" \
        --ref "$M30K/$split.de" | head -1
    done
  done
} | tee results/back_translation.txt
