"""Test BLEU of every checkpoint of a run against its training minutes (BLEU-vs-time curves).

    python scripts/bleu_curve.py --run runs/multi30k --src SRC --ref REF \
        --output results/multi30k_bleu_curve.csv [--dtype bfloat16] [--beam-size 4]

Each checkpoint is scored alone (no averaging), beam 4 / alpha 0.6 by default; its training
minutes come from the run's ``history.csv`` (checkpoints are written at epoch ends, every
``steps_per_epoch`` steps). ``--dtype bfloat16`` decodes a little faster on CPUs with AVX512-BF16
(``keras_transformer.cast_model``; same BLEU within ~0.1 on Multi30k val). The CSV feeds
``scripts/plot_results.py --bleu-csv``.
"""

import argparse
import csv
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from report import checkpoint_at_minutes, history  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--dtype", default=None, help="decode under this Keras dtype policy")
    args = parser.parse_args(argv)

    from keras_transformer import cast_model
    from keras_transformer.evaluation import read_lines, score_translations, translate_sentences
    from keras_transformer.tokenization import SubwordTokenizer
    from keras_transformer.training import load_run_model

    rows = history(args.run)
    sources, references = read_lines(args.src), read_lines(args.ref)
    tokenizer = SubwordTokenizer.load(pathlib.Path(args.run) / "tokenizer")
    out = pathlib.Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["checkpoint", "train_minutes", "bleu", "chrf"])
        for row in rows:
            found = checkpoint_at_minutes(args.run, rows, float(row["train_minutes"]))
            if found is None:
                continue
            path, minutes = found
            model = load_run_model(args.run, weights=path)
            if args.dtype:
                model = cast_model(model, args.dtype)
            hypotheses = translate_sentences(model, tokenizer, sources, beam_size=args.beam_size,
                                             alpha=args.alpha)
            scores = score_translations(hypotheses, references)
            writer.writerow([path.name, f"{minutes:.2f}", f"{scores['bleu'].score:.2f}",
                             f"{scores['chrf'].score:.2f}"])
            handle.flush()
            print(f"{path.name}: {minutes:.1f} min, BLEU {scores['bleu'].score:.2f}", flush=True)
    print(f"Wrote {out}")


if __name__ == "__main__":
    main()
