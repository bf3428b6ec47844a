"""The shared tokenizer's training time and peak memory against its sample size.

``prepare`` (and ``train`` without a tokenizer) trains SentencePiece BPE on a seeded reservoir
sample of at most ``--max-sentences`` lines of both sides of the training corpus (default 2
million). This trains it in a fresh process for each sample size and vocabulary size on the
given corpus and prints the seconds of the whole training (``train_seconds``), of reading and
sampling the corpus alone (``sample_seconds``, measured in a first pass whose sample is then
dropped) and their difference (SentencePiece), and the process's peak RSS.

Usage::

    python -m benchmarks.data.tokenizer_training --corpus /tmp/wmt_like/x1 \\
        --max-sentences 100000,1000000,2000000 --vocab-sizes 37000 --json results/t.json
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

from benchmarks.process_memory import run_measured

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]

CHILD = """
import json, pathlib, sys, time
from keras_transformer.text.sentencepiece_model import sample_sentences, training_text
from keras_transformer.text.tokenizer import SubwordTokenizer
corpus, vocab, sample = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
files = [corpus / "train.en", corpus / "train.de"]
started = time.perf_counter()
count = len(sample_sentences(training_text(files), sample, 0))
sampled = time.perf_counter()
SubwordTokenizer.train(files, vocab, max_sentences=sample)
total = time.perf_counter() - sampled
print(json.dumps({"sentences": count, "sample_seconds": round(sampled - started, 1),
                  "train_seconds": round(total, 1),
                  "sentencepiece_seconds": round(total - (sampled - started), 1)}))
"""


def measure(corpus: pathlib.Path, vocab_size: int, max_sentences: int) -> dict:
    """Train once in a fresh process; seconds and peak RSS."""
    args = [sys.executable, "-c", CHILD, str(corpus), str(vocab_size), str(max_sentences)]
    result, peaks = run_measured(args, cwd=REPO_ROOT)
    if result.returncode:
        raise SystemExit(f"training failed:\n{result.stderr[-3000:]}")
    timing = json.loads(result.stdout.strip().splitlines()[-1])
    return {
        "corpus": str(corpus),
        "vocab_size": vocab_size,
        "max_sentences": max_sentences,
        **timing,
        "peak_rss_mib": max(p["peak_rss_mib"] for p in peaks),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True, help="a folder with train.en and train.de")
    parser.add_argument("--max-sentences", default="100000,1000000")
    parser.add_argument("--vocab-sizes", default="37000")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    rows = []
    for vocab in map(int, args.vocab_sizes.split(",")):
        for sample in map(int, args.max_sentences.split(",")):
            row = measure(pathlib.Path(args.corpus), vocab, sample)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
