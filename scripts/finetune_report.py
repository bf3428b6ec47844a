"""Writes the fine-tuning results file: BLEU and chrF on newstest2014 and Multi30k test before
and after fine-tuning, the run's minutes and updates, and what the kept vocabulary does to the
new domain's text (subwords per word, UNK ids, pairs over the length limit).

    python scripts/finetune_report.py --base runs/multi30k --run runs/ft_news \
        --translations runs/ft_news-eval --output results/finetune_newstest.md --command "..."
"""

import argparse
import datetime
import json
import os
import pathlib

TESTS = {
    "newstest2014": "wmt14_en_de/newstest2014",
    "test_2016_flickr": "multi30k/test_2016_flickr",
}
TEXTS = {
    "Multi30k train": "multi30k/train",
    "newstest2013": "wmt14_en_de/newstest2013",
    "newstest2014": "wmt14_en_de/newstest2014",
}


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("--base", "--run", "--translations", "--output", "--command"):
        parser.add_argument(name, required=True)
    return parser


def scores(data: pathlib.Path, translations: pathlib.Path) -> list[str]:
    from keras_transformer.evaluation import score_translations
    from keras_transformer.text.lines import read_lines

    rows = ["| test set | BLEU before | BLEU after | chrF before | chrF after |"]
    rows.append("|---|---|---|---|---|")
    for name, stem in TESTS.items():
        references = read_lines(data / f"{stem}.de")
        got = {}
        for when in ("before", "after"):
            hypotheses = read_lines(translations / f"{when}.{name}.de")
            got[when] = score_translations(hypotheses, references)
        rows.append(
            f"| {name} | {got['before']['bleu'].score:.2f} | {got['after']['bleu'].score:.2f} | "
            f"{got['before']['chrf'].score:.2f} | {got['after']['chrf'].score:.2f} |"
        )
    signatures = f"`{got['after']['bleu_signature']}`, `{got['after']['chrf_signature']}`"
    rows.append(f"\nsacreBLEU: {signatures}")
    return rows


def vocabulary(data: pathlib.Path, base: pathlib.Path, max_length: int) -> list[str]:
    """Subwords per word, UNK share and pairs over ``max_length`` pieces, per corpus."""
    import numpy as np

    from keras_transformer.text.lines import read_lines
    from keras_transformer.text.tokenizer import SubwordTokenizer

    tokenizer = SubwordTokenizer.load(base / "tokenizer")
    rows = [
        "| text | side | subwords per word | UNK ids per 1000 | pairs over the limit |",
        "|---|---|---|---|---|",
    ]
    for name, stem in TEXTS.items():
        lengths = []
        for side in ("en", "de"):
            lines = read_lines(data / f"{stem}.{side}")
            ids = tokenizer.tokenize(lines)
            flat = np.asarray(ids.flat_values)
            pieces = np.asarray(ids.row_lengths())
            lengths.append(pieces)
            words = sum(len(line.split()) for line in lines)
            unk = 1000 * float(np.mean(flat == 1))
            over = "" if side == "en" else f"{np.mean(np.maximum(*lengths) + 1 > max_length):.1%}"
            rows.append(f"| {name} | {side} | {len(flat) / words:.2f} | {unk:.2f} | {over} |")
    return rows


def training_summary(run: pathlib.Path) -> str:
    from keras_transformer.training import TrainingConfig

    config = TrainingConfig.load(run / "config.yaml")
    steps = json.loads((run / "finished.json").read_text())["steps"]
    minutes = json.loads((run / "time_spent.json").read_text())["seconds"] / 60
    return (
        f"Fine-tuned from `{config.training.init_from}` for {steps} updates ({minutes:.1f} "
        f"training minutes): warm-up {config.training.warmup_steps}, "
        f"lr_scale {config.training.lr_scale}, dropout {config.model.dropout}, "
        f"{config.data.tokens_per_batch} tokens per batch."
    )


def main(argv=None):
    args = build_parser().parse_args(argv)
    data = pathlib.Path(os.environ.get("KT_DATA_DIR", "../shared/data"))
    run, base = pathlib.Path(args.run), pathlib.Path(args.base)
    from keras_transformer.training import TrainingConfig

    max_length = TrainingConfig.load(run / "config.yaml").data.max_sentence_length
    lines = [
        "# Fine-tuning a Multi30k model on newstest2013",
        "",
        f"`{args.command}` ({datetime.date.today().isoformat()}, 2-core CPU; beam 4 through the "
        "CTranslate2 export, equal to the SavedModel's output).",
        "",
        training_summary(run),
        "",
        *scores(data, pathlib.Path(args.translations)),
        "",
        "## The kept vocabulary on the new domain",
        "",
        f"The tokenizer of `{base}`: the fine-tuned model keeps it (training/init_from.py). "
        "News words it lacks are split into more, shorter pieces; characters it never saw "
        "into UTF-8 byte pieces (byte fallback), so UNK stays at 0 while sentences get "
        f"longer. Pairs over {max_length} subwords (EOS included) are not trained on.",
        "",
        *vocabulary(data, base, max_length),
        "",
    ]
    pathlib.Path(args.output).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
