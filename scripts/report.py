"""Writes a results file for one experiment: command, config, training time, BLEU/chrF with
signatures, the training curve, BLEU at intermediate checkpoints, and example translations.

    python scripts/report.py --run runs/multi30k --model saved_models/multi30k_en_de \
        --config configs/multi30k.yaml --src SRC --ref REF --hypotheses runs/multi30k/test.hyp \
        --output results/multi30k_en_de.md [--bleu-at-minutes 40] [--overrides KEY=VALUE ...]
"""

import argparse
import datetime
import json
import pathlib
import shlex
import subprocess


def build_parser():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    for name in ("--run", "--model", "--config", "--src", "--ref", "--hypotheses", "--output"):
        parser.add_argument(name, required=True)
    parser.add_argument("--bleu-at-minutes", type=float, nargs="*", default=[40.0])
    parser.add_argument("--examples", type=int, default=10)
    parser.add_argument(
        "--overrides",
        nargs="*",
        default=[],
        help="the KEY=VALUE config overrides the run was trained with",
    )
    return parser


def _json(path, default):
    path = pathlib.Path(path)
    return json.loads(path.read_text()) if path.exists() else default


def header_and_scores(args, scores):
    """Title, command and the test-set scores with their signatures."""
    settings_file = pathlib.Path(args.model) / "assets.extra" / "translator.json"
    settings = _json(settings_file, {"translator": {"beam_size": 4, "alpha": 0.6}})["translator"]
    served = (
        f"beam {settings['beam_size']}, alpha {settings['alpha']}, "
        f"{settings.get('dtype', 'float32')}"
    )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    command = shlex.join(
        [
            "scripts/experiment.sh",
            args.config,
            args.run,
            args.model,
            args.src,
            args.ref,
            args.output,
            *args.overrides,
        ]
    )
    return [
        f"# {pathlib.Path(args.output).stem}",
        "",
        f"Date: {datetime.date.today()} · commit `{commit}` · machine: 2-core CPU, no GPU",
        "",
        "## Command",
        "",
        "```bash",
        command,
        "```",
        "",
        f"## Test set scores (exported SavedModel: {served}; detokenized)",
        "",
        "| metric | score | signature |",
        "|---|---|---|",
        f"| BLEU | **{scores['bleu'].score:.2f}** | `{scores['bleu_signature']}` |",
        f"| BLEU (lowercased) | {scores['bleu_lowercase'].score:.2f} | "
        f"`{scores['bleu_lowercase_signature']}` |",
        f"| chrF | {scores['chrf'].score:.2f} | `{scores['chrf_signature']}` |",
        "",
        f"`{scores['bleu']}`",
        "",
    ]


def training_table(args, rows):
    """One row per epoch of the run's history."""
    if not rows:
        return []
    spent = _json(pathlib.Path(args.run) / "time_spent.json", {})
    lines = [
        "## Training",
        "",
        f"Training wall-clock: {spent.get('seconds', 0) / 60:.1f} minutes over {len(rows)} "
        f"epochs of `steps_per_epoch` steps.",
        "",
        "| epoch | minutes | loss | val_loss | val accuracy | tokens/s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {int(r['epoch']) + 1} | {float(r.get('train_minutes') or 0):.1f} | "
            f"{float(r['loss']):.3f} | {float(r.get('val_loss') or 'nan'):.3f} | "
            f"{float(r.get('val_masked_accuracy') or 'nan'):.3f} | "
            f"{float(r.get('tokens_per_second') or 0):.0f} |"
        )
    return [*lines, ""]


def bleu_at_minutes(args, rows, sources, references):
    """Test BLEU of the single checkpoints nearest each ``--bleu-at-minutes`` budget."""
    from keras_transformer.evaluation import score_translations, translate_sentences
    from keras_transformer.text.tokenizer import TOKENIZER_DIR, SubwordTokenizer
    from keras_transformer.training import checkpoint_at_minutes, load_run_model

    found = []
    for minutes in args.bleu_at_minutes or []:
        checkpoint = checkpoint_at_minutes(args.run, rows, minutes)
        if checkpoint is None:
            continue
        path, actual = checkpoint
        model = load_run_model(args.run, weights=path)
        tokenizer = SubwordTokenizer.load(pathlib.Path(args.run) / TOKENIZER_DIR)
        hyps = translate_sentences(model, tokenizer, sources, beam_size=4, alpha=0.6)
        bleu = score_translations(hyps, references)["bleu"].score
        found.append(f"| {minutes:.0f} | `{path.name}` | {actual:.1f} | {bleu:.2f} |")
    if not found:
        return []
    return [
        "## BLEU against training time (test set, beam 4, single checkpoint, no averaging)",
        "",
        "| budget (min) | checkpoint | trained (min) | BLEU |",
        "|---|---|---|---|",
        *found,
        "",
    ]


def config_and_examples(args, sources, hypotheses, references):
    lines = ["## Config", "", "```yaml", pathlib.Path(args.config).read_text().rstrip(), "```", ""]
    if args.overrides:
        lines += [
            f"Trained with the overrides `{' '.join(args.overrides)}` on top of this file.",
            "",
        ]
    lines += [
        f"## {args.examples} example translations (test set)",
        "",
        "| source | ours | reference |",
        "|---|---|---|",
    ]
    step = max(1, len(sources) // max(args.examples, 1))
    for i in list(range(0, len(sources), step))[: args.examples]:
        cells = [s.replace("|", "\\|") for s in (sources[i], hypotheses[i], references[i])]
        lines.append(f"| {cells[0]} | {cells[1]} | {cells[2]} |")
    return lines


def main(argv=None):
    args = build_parser().parse_args(argv)
    from keras_transformer.evaluation import score_translations
    from keras_transformer.text.lines import read_lines
    from keras_transformer.training import history

    sources, references, hypotheses = (read_lines(p) for p in (args.src, args.ref, args.hypotheses))
    scores = score_translations(hypotheses, references, lowercase=True)
    rows = history(args.run)
    lines = header_and_scores(args, scores) + training_table(args, rows)
    lines += bleu_at_minutes(args, rows, sources, references)
    lines += config_and_examples(args, sources, hypotheses, references)
    out = pathlib.Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"Wrote {out}")


if __name__ == "__main__":
    main()
