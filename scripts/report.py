"""Writes a results file for one experiment: command, config, training time, BLEU/chrF with
signatures, the training curve, BLEU at intermediate checkpoints, and example translations.

    python scripts/report.py --run runs/multi30k --model saved_models/multi30k_en_de \
        --config configs/multi30k.yaml --src SRC --ref REF --hypotheses runs/multi30k/test.hyp \
        --output results/multi30k_en_de.md [--bleu-at-minutes 40] [--overrides KEY=VALUE ...]
"""

import argparse
import csv
import datetime
import json
import pathlib
import shlex
import subprocess


def history(run):
    path = pathlib.Path(run) / "history.csv"
    if not path.exists():
        return []
    with open(path) as handle:
        return list(csv.DictReader(handle))


def checkpoint_at_minutes(run, rows, minutes):
    """The checkpoint saved at the end of the last epoch finished within ``minutes``."""
    from keras_transformer.training import list_checkpoints

    steps_per_epoch = None
    config = pathlib.Path(run) / "config.yaml"
    if config.exists():
        import yaml

        steps_per_epoch = yaml.safe_load(config.read_text())["training"]["steps_per_epoch"]
    done = [int(r["epoch"]) + 1 for r in rows if float(r.get("train_minutes") or 1e9) <= minutes]
    if not done or steps_per_epoch is None:
        return None
    step = max(done) * steps_per_epoch
    for path in list_checkpoints(pathlib.Path(run) / "checkpoints"):
        if int(path.name.split("-")[1].split(".")[0]) == step:
            return path, float([r for r in rows if int(r["epoch"]) + 1 == max(done)][0]["train_minutes"])
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--hypotheses", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--bleu-at-minutes", type=float, nargs="*", default=[40.0])
    parser.add_argument("--examples", type=int, default=10)
    parser.add_argument("--overrides", nargs="*", default=[],
                        help="the KEY=VALUE config overrides the run was trained with")
    args = parser.parse_args(argv)

    from keras_transformer.evaluation import read_lines, score_translations

    sources, references, hypotheses = (read_lines(p) for p in (args.src, args.ref, args.hypotheses))
    scores = score_translations(hypotheses, references, lowercase=True)
    rows = history(args.run)
    spent = json.loads((pathlib.Path(args.run) / "time_spent.json").read_text()) \
        if (pathlib.Path(args.run) / "time_spent.json").exists() else {}
    settings_file = pathlib.Path(args.model) / "assets.extra" / "translator.json"
    settings = (json.loads(settings_file.read_text())["translator"] if settings_file.exists()
                else {"beam_size": 4, "alpha": 0.6})
    served = (f"beam {settings['beam_size']}, alpha {settings['alpha']}, "
              f"{settings.get('dtype', 'float32')}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()

    command = shlex.join(["scripts/experiment.sh", args.config, args.run, args.model, args.src,
                          args.ref, args.output, *args.overrides])
    lines = [f"# {pathlib.Path(args.output).stem}", "",
             f"Date: {datetime.date.today()} · commit `{commit}` · machine: 2-core CPU, no GPU", "",
             "## Command", "", "```bash", command, "```", "",
             f"## Test set scores (exported SavedModel: {served}; detokenized)", "",
             "| metric | score | signature |", "|---|---|---|",
             f"| BLEU | **{scores['bleu'].score:.2f}** | `{scores['bleu_signature']}` |",
             f"| BLEU (lowercased) | {scores['bleu_lowercase'].score:.2f} | `{scores['bleu_lowercase_signature']}` |",
             f"| chrF | {scores['chrf'].score:.2f} | `{scores['chrf_signature']}` |", "",
             f"`{scores['bleu']}`", ""]

    if rows:
        lines += ["## Training", "",
                  f"Training wall-clock: {spent.get('seconds', 0) / 60:.1f} minutes over {len(rows)} "
                  f"epochs of `steps_per_epoch` steps.", "",
                  "| epoch | minutes | loss | val_loss | val accuracy | tokens/s |", "|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {int(r['epoch']) + 1} | {float(r.get('train_minutes') or 0):.1f} | "
                         f"{float(r['loss']):.3f} | {float(r.get('val_loss') or 'nan'):.3f} | "
                         f"{float(r.get('val_masked_accuracy') or 'nan'):.3f} | "
                         f"{float(r.get('tokens_per_second') or 0):.0f} |")
        lines.append("")

    at_minutes = []
    for minutes in args.bleu_at_minutes or []:
        found = checkpoint_at_minutes(args.run, rows, minutes)
        if found is None:
            continue
        from keras_transformer.evaluation import translate_sentences
        from keras_transformer.tokenization import SubwordTokenizer
        from keras_transformer.training import load_run_model

        path, actual = found
        model = load_run_model(args.run, weights=path)
        tokenizer = SubwordTokenizer.load(pathlib.Path(args.run) / "tokenizer")
        hyps = translate_sentences(model, tokenizer, sources, beam_size=4, alpha=0.6)
        bleu = score_translations(hyps, references)["bleu"].score
        at_minutes.append((minutes, actual, path.name, bleu))
    if at_minutes:
        lines += ["## BLEU against training time (test set, beam 4, single checkpoint, no averaging)", "",
                  "| budget (min) | checkpoint | trained (min) | BLEU |", "|---|---|---|---|"]
        lines += [f"| {m:.0f} | `{name}` | {actual:.1f} | {bleu:.2f} |" for m, actual, name, bleu in at_minutes]
        lines.append("")

    lines += ["## Config", "", "```yaml", pathlib.Path(args.config).read_text().rstrip(), "```", ""]
    if args.overrides:
        lines += [f"Trained with the overrides `{' '.join(args.overrides)}` on top of this file.", ""]
    lines += [f"## {args.examples} example translations (test set)", "",
              "| source | ours | reference |", "|---|---|---|"]
    step = max(1, len(sources) // max(args.examples, 1))
    for i in list(range(0, len(sources), step))[: args.examples]:
        cells = [s.replace("|", "\\|") for s in (sources[i], hypotheses[i], references[i])]
        lines.append(f"| {cells[0]} | {cells[1]} | {cells[2]} |")
    out = pathlib.Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"Wrote {out}")


if __name__ == "__main__":
    main()
