"""Validation BLEU of beam sizes x length penalties, to choose a run's ``search:`` section.

Decodes with a CTranslate2 export of the run (``keras-transformer export --format ctranslate2``),
whose beam size and alpha are set per call; its finished hypotheses are re-ranked by our GNMT
score, so it chooses what the SavedModel's search would (``results/serving.md``: 1000/1000 the
same text at beam 4, alpha 0.6). Confirm the choice with a SavedModel export on validation.

    python scripts/search_sweep.py --model /tmp/recipe_ct2 --src VAL.en --ref VAL.de \\
        --beams 4 6 8 --alphas 0.6 1.0 1.4 2.0 2.5 3.0 --output results/search_sweep.csv
"""

import argparse
import csv
import pathlib
import time


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a CTranslate2 export folder")
    p.add_argument("--src", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--beams", type=int, nargs="+", default=[4])
    p.add_argument("--alphas", type=float, nargs="+", default=[0.6])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--output", default=None, help="CSV of beam, alpha, BLEU, BP, length ratio")
    args = p.parse_args(argv)

    from keras_transformer.evaluation import corpus_bleu
    from keras_transformer.inference.formats import load_translator

    translator = load_translator(args.model, intra_threads=args.threads)
    sources = pathlib.Path(args.src).read_text(encoding="utf-8").splitlines()
    references = pathlib.Path(args.ref).read_text(encoding="utf-8").splitlines()
    rows = []
    for beam in args.beams:
        for alpha in args.alphas:
            start = time.perf_counter()
            hypotheses = translator.translate(sources, 64, beam_size=beam, alpha=alpha)
            bleu = corpus_bleu(hypotheses, references)
            row = dict(
                beam=beam,
                alpha=alpha,
                bleu=round(bleu.score, 2),
                bp=round(bleu.bp, 3),
                length_ratio=round(bleu.sys_len / bleu.ref_len, 3),
                seconds=round(time.perf_counter() - start, 1),
            )
            print(row, flush=True)
            rows.append(row)
    best = max(rows, key=lambda r: r["bleu"])
    print(f"best on {args.src}: beam {best['beam']}, alpha {best['alpha']}: BLEU {best['bleu']}")
    if args.output:
        with open(args.output, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
