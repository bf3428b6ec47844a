"""Plots a run's training curves and BLEU against training time beside the keras.io baseline.

    python scripts/plot_results.py --run runs/multi30k --bleu-csv results/multi30k_bleu_curve.csv \
        --bleu 88.5:38.41 --baseline 40:26.6 --output results/multi30k_curves.png

``--bleu-csv`` (from ``keras-transformer bleu-curve``) draws every single checkpoint; ``--bleu``
adds points such as the final averaged model.
"""

import argparse
import csv
import pathlib


def build_parser():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", required=True)
    parser.add_argument(
        "--bleu-csv", help="keras-transformer bleu-curve output: BLEU of each checkpoint"
    )
    parser.add_argument(
        "--bleu",
        nargs="*",
        default=[],
        help="MINUTES:BLEU points of ours (test set), e.g. the averaged model",
    )
    parser.add_argument(
        "--baseline", nargs="*", default=[], help="MINUTES:BLEU points of the baseline"
    )
    parser.add_argument("--title", default="Multi30k en-de, 2-core CPU")
    parser.add_argument("--output", required=True)
    return parser


def _points(values):
    pairs = [tuple(float(x) for x in v.split(":")) for v in values]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def plot_loss(loss_ax, rows, minutes):
    loss_ax.plot(
        minutes, [float(r["loss"]) for r in rows], "o-", label="training loss (label-smoothed)"
    )
    loss_ax.plot(minutes, [float(r["val_loss"]) for r in rows], "s-", label="validation loss")
    loss_ax.set_xlabel("training minutes")
    loss_ax.set_ylabel("loss")
    loss_ax.legend()
    loss_ax.grid(alpha=0.3)


def plot_bleu(bleu_ax, args, minutes):
    if args.bleu_csv:
        with open(args.bleu_csv) as handle:
            curve = list(csv.DictReader(handle))
        bleu_ax.plot(
            [float(r["train_minutes"]) for r in curve],
            [float(r["bleu"]) for r in curve],
            "o-",
            label="keras-transformer, each checkpoint (beam 4)",
        )
    if args.bleu:
        x, y = _points(args.bleu)
        bleu_ax.plot(x, y, "*", markersize=12, label="keras-transformer, averaged (beam 4)")
    if args.baseline:
        x, y = _points(args.baseline)
        bleu_ax.plot(x, y, "x", markersize=10, label="keras.io recipe (greedy)")
    bleu_ax.set_xlabel("training minutes")
    bleu_ax.set_ylabel("sacreBLEU (test_2016_flickr, cased)")
    bleu_ax.set_xlim(0, max(minutes) + 5)
    bleu_ax.set_ylim(0, 45)
    bleu_ax.legend(loc="lower right")
    bleu_ax.grid(alpha=0.3)


def main(argv=None):
    args = build_parser().parse_args(argv)
    from matplotlib.figure import Figure

    with open(pathlib.Path(args.run) / "history.csv") as handle:
        rows = list(csv.DictReader(handle))
    minutes = [float(r["train_minutes"]) for r in rows]
    fig = Figure(figsize=(10, 4), layout="constrained")
    loss_ax, bleu_ax = fig.subplots(1, 2)
    plot_loss(loss_ax, rows, minutes)
    plot_bleu(bleu_ax, args, minutes)
    fig.suptitle(args.title)
    fig.savefig(args.output, dpi=100)
    print(f"Wrote {args.output}")


if __name__ == "__main__":
    main()
