#!/usr/bin/env bash
# The scale measurements of results/scale.md (issue: a WMT14-sized corpus on one machine): the
# synthetic corpus at 0.01x, 0.1x and 1x (1x = 4.5 million pairs), the tokenizer's training cost,
# prepare on the process pool and Beam with 1 and 2 workers, shards for training, and training
# from them (input pipeline, model consumption, restart). About 2 hours on 2 cores, 6 GB of
# disk under WORK. Raw JSON goes to results/scale/.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${KT_DATA_DIR:-$(cd .. && pwd)/shared/data}
WORK=${1:-/tmp/kt-scale}
OUT=results/scale
mkdir -p "$WORK" "$OUT"
SCALES="0.01 0.1 1"
for s in $SCALES; do
  python -m benchmarks.data.synthetic_corpus --scale "$s" --output "$WORK/corpus/x$s" --data-dir "$DATA"
  cp "$WORK/corpus/x$s/corpus.json" "$OUT/corpus_x$s.json"
done
python -m benchmarks.data.tokenizer_training --corpus "$WORK/corpus/x1" \
  --max-sentences 100000,1000000,2000000 --vocab-sizes 37000 --json "$OUT/tokenizer_training.json"
python - "$WORK" <<'PY'
import pathlib, sys
from keras_transformer.text.tokenizer import SubwordTokenizer
work = pathlib.Path(sys.argv[1])
files = [work / "corpus/x1/train.en", work / "corpus/x1/train.de"]
SubwordTokenizer.train(files, 37000, max_sentences=1_000_000).save(work / "tokenizer")
PY
python -m benchmarks.data.prepare_throughput --tokenizer "$WORK/tokenizer" --num-shards 8 \
  --corpus "$WORK/corpus/x0.01" --corpus "$WORK/corpus/x0.1" --corpus "$WORK/corpus/x1" \
  --json "$OUT/prepare.json"
for s in $SCALES; do
  keras-transformer prepare --source "$WORK/corpus/x$s/train.en" --target "$WORK/corpus/x$s/train.de" \
    --tokenizer "$WORK/tokenizer" --executor process --workers 2 --output "$WORK/shards/x$s"
done
python -m benchmarks.data.scale_training --shards "$WORK/shards/x1" --warmup 2 --steps 6 \
  --positions 0.25,1,2.25 --replay-max-passes 0.25 --json "$OUT/training_x1.json"
for s in 0.1 0.01; do
  python -m benchmarks.data.scale_training --shards "$WORK/shards/x$s" --modes pipeline \
    --json "$OUT/training_x$s.json"
done
# The restart after parts (prepare records kept_by_length; shards grouped in parts of ~1M pairs):
python -m benchmarks.data.scale_training --shards "$WORK/shards/x1" --modes restart \
  --positions 0.25,0.5,0.9,1,2.9 --methods segments --json "$OUT/restart_parts.json"
python -m benchmarks.data.scale_training --shards "$WORK/shards/x1" --modes resume \
  --json "$OUT/resume_parts.json"
python -m benchmarks.data.scale_training --shards "$WORK/shards/x1" --modes restart \
  --positions 0.9 --methods one-part --json "$OUT/restart_one_part.json"
