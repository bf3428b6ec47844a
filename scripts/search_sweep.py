"""Validation BLEU of beam sizes x length penalties, over one or several models, to choose a
config's ``search:`` section.

Two ways to decode:

* ``--model EXPORT ...``: CTranslate2 exports (``keras-transformer export --format ctranslate2``),
  whose beam size and alpha are set per call; their finished hypotheses are re-ranked by our GNMT
  score, so they choose what the SavedModel's search would (``results/serving.md``: 1000/1000 the
  same text at beam 4, alpha 0.6).
* ``--run RUN [RUN2 ...] --weights W [W ...]``: the in-process ``Translator``, the module a
  SavedModel export saves (the same search graph), built for each beam size and alpha from each
  run's weights (``averaged``, a checkpoint file, or ``final`` for the run's final model;
  ``RUN:W`` gives one run its own).

With several models a setting's figure is its mean BLEU over them (the spread beside it): a
default chosen on one model is the top of one noisy grid.

    python scripts/search_sweep.py --run runs/multi30k_recipe --weights averaged final \\
        --src VAL.en --ref VAL.de --beams 4 8 --alphas 0.6 1.0 2.0 3.0 4.0 \\
        --output results/search_sweep.csv
"""

import argparse
import csv
import json
import pathlib
import statistics
import time


def exported_translators(paths, threads):
    """``(name, translate(lines, beam, alpha))`` for CTranslate2 exports."""
    from keras_transformer.inference.formats import load_translator

    for path in paths:
        translator = load_translator(path, intra_threads=threads)

        def translate(lines, beam, alpha, translator=translator):
            return translator.translate(lines, 64, beam_size=beam, alpha=alpha)

        yield str(path), translate


def in_process_translators(runs, weights, dtype):
    """``(name, translate(lines, beam, alpha))`` for each run's ``weights``, decoded by the
    ``Translator`` module a SavedModel export saves, in batches of 64 similar lengths."""
    import tensorflow as tf

    from keras_transformer.cli.run_commands import load_run
    from keras_transformer.inference.batching import length_sorted_batches
    from keras_transformer.inference.saved_model import Translator

    for entry in runs:
        run, _, own = entry.partition(":")  # RUN:WEIGHTS: this run's own weights
        for weight in [own] if own else weights:
            model, tokenizer = load_run(run, None if weight == "final" else weight)

            def translate(lines, beam, alpha, model=model, tokenizer=tokenizer):
                translator = Translator(model, tokenizer, beam_size=beam, alpha=alpha, dtype=dtype)
                results = [""] * len(lines)
                for chunk in length_sorted_batches([len(line) or 1 for line in lines], 64):
                    out = translator.translate(tf.constant([lines[i] for i in chunk]))
                    for i, text in zip(chunk, out["translation"].numpy(), strict=True):
                        results[i] = text.decode("utf-8")
                return results

            yield f"{run}:{weight}", translate


PAPER_SEARCH = (4, 0.6)  # section 6.1: beam 4, alpha 0.6, the baseline of each model's gains


def summary(rows):
    """Per (beam, alpha), over the models: mean and lowest BLEU, and the gain over each model's
    own BLEU with the paper's search (paired, so differences between models cancel): mean,
    standard deviation, lowest. Sorted by the mean gain (by mean BLEU without the paper's row)."""
    bleu = {(row["model"], row["beam"], row["alpha"]): row["bleu"] for row in rows}
    settings = {}
    for model, beam, alpha in bleu:
        settings.setdefault((beam, alpha), []).append(model)
    table = []
    for (beam, alpha), models in settings.items():
        scores = [bleu[model, beam, alpha] for model in models]
        entry = dict(
            beam=beam,
            alpha=alpha,
            models=len(models),
            mean_bleu=round(statistics.fmean(scores), 2),
            lowest_bleu=min(scores),
        )
        gains = [
            bleu[m, beam, alpha] - bleu[(m, *PAPER_SEARCH)]
            for m in models
            if (m, *PAPER_SEARCH) in bleu
        ]
        if len(gains) == len(models):
            entry.update(
                mean_gain=round(statistics.fmean(gains), 2),
                sd_gain=round(statistics.stdev(gains), 2) if len(gains) > 1 else 0.0,
                lowest_gain=round(min(gains), 2),
            )
        table.append(entry)
    return sorted(table, key=lambda r: (-r.get("mean_gain", 0.0), -r["mean_bleu"]))


def read_rows(path):
    """The rows of a CSV this script wrote, numbers as numbers."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row["beam"], row["alpha"], row["bleu"] = (
            int(row["beam"]),
            float(row["alpha"]),
            float(row["bleu"]),
        )
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", nargs="+", default=[], help="CTranslate2 export folders")
    p.add_argument("--run", nargs="+", default=[], help="run folders (the in-process search)")
    p.add_argument(
        "--weights", nargs="+", default=["averaged"], help="for --run: averaged, final, a file"
    )
    p.add_argument("--dtype", default=None, help="for --run: float32 or bfloat16")
    p.add_argument("--src")
    p.add_argument("--ref")
    p.add_argument("--from-csv", help="summarize a CSV this script wrote, decoding nothing")
    p.add_argument("--beams", type=int, nargs="+", default=[4])
    p.add_argument("--alphas", type=float, nargs="+", default=[0.6])
    p.add_argument("--threads", type=int, default=2, help="for --model: CTranslate2's threads")
    p.add_argument("--output", default=None, help="CSV, one row per model and setting")
    p.add_argument("--summary", default=None, help="JSON of the mean over the models per setting")
    args = p.parse_args(argv)
    if args.from_csv:
        rows = read_rows(args.from_csv)
    elif not args.model and not args.run or not (args.src and args.ref):
        p.error("give --src, --ref and --model (CTranslate2 exports) or --run (run folders)")
    else:
        rows = sweep(args)
    table = summary(rows)
    for row in table:
        print(row)
    best = table[0]
    print(
        f"best over {best['models']} model(s): beam {best['beam']}, alpha {best['alpha']}: "
        f"mean BLEU {best['mean_bleu']}, mean gain over beam 4 / alpha 0.6 "
        f"{best.get('mean_gain', '-')} (sd {best.get('sd_gain', '-')})"
    )
    if args.summary:
        pathlib.Path(args.summary).write_text(json.dumps(table, indent=1) + "\n")


def sweep(args):
    """Decodes ``--src`` with every model and setting; the rows (also written to ``--output``)."""
    from keras_transformer.evaluation import corpus_bleu

    sources = pathlib.Path(args.src).read_text(encoding="utf-8").splitlines()
    references = pathlib.Path(args.ref).read_text(encoding="utf-8").splitlines()
    models = [
        *exported_translators(args.model, args.threads),
        *in_process_translators(args.run, args.weights, args.dtype),
    ]
    rows = []
    for name, translate in models:
        for beam in args.beams:
            for alpha in args.alphas:
                start = time.perf_counter()
                hypotheses = translate(sources, beam, alpha)
                bleu = corpus_bleu(hypotheses, references)
                row = dict(
                    model=name,
                    beam=beam,
                    alpha=alpha,
                    bleu=round(bleu.score, 2),
                    bleu_lowercase=round(corpus_bleu(hypotheses, references, True).score, 2),
                    bp=round(bleu.bp, 3),
                    length_ratio=round(bleu.sys_len / bleu.ref_len, 3),
                    seconds=round(time.perf_counter() - start, 1),
                )
                print(row, flush=True)
                rows.append(row)
                if args.output:  # rewritten after each row: a killed sweep keeps what it did
                    with open(args.output, "w", newline="") as handle:
                        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
                        writer.writeheader()
                        writer.writerows(rows)
    return rows


if __name__ == "__main__":
    main()
