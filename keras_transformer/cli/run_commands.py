"""Subcommands on run directories: prepare, train, average, bleu-curve, export, attention."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import signal
import sys
import time

from keras_transformer.inference.settings import SearchSettings, add_flags, given_flags


def add_prepare(commands, parent):
    from pipelines import prepare

    p = commands.add_parser(
        "prepare",
        parents=[parent],
        help="tokenizer + TFRecord shards + manifest for a corpus (pipelines.prepare)",
        description=prepare.build_parser().description,
    )
    prepare.add_arguments(p)
    p.set_defaults(func=lambda args: prepare.run(args, p))


def add_train(commands, parent):
    p = commands.add_parser(
        "train",
        parents=[parent],
        help="train (or resume) a model with model.fit",
        description="Train or resume a run. Overrides look like training.max_steps=200.",
    )
    p.add_argument(
        "--config", required=True, help="training config (YAML or JSON), e.g. configs/multi30k.yaml"
    )
    p.add_argument(
        "--run",
        default=None,
        help="run directory (default runs/<config name>); resumes if it exists",
    )
    p.add_argument(
        "--shards",
        default=None,
        help="train from this folder of prepared shards (keras-transformer prepare): the same as "
        "data.shards=DIR; the raw text is never opened",
    )
    p.add_argument(
        "--init-from",
        default=None,
        metavar="RUN_OR_MODEL",
        help="fine-tune: start from this run directory's (or .keras / .weights.h5 file's) "
        "weights and tokenizer, with this config's schedule; the same as training.init_from=...",
    )
    p.add_argument(
        "--tokenizer",
        default=None,
        metavar="FOLDER",
        help="the run's tokenizer (the same as data.tokenizer=...); with --init-from another "
        "vocabulary than the model's: its embedding rows follow the pieces "
        "(keras_transformer/training/vocab_update.py)",
    )
    p.add_argument("overrides", nargs="*", help="section.field=value overrides")
    p.set_defaults(check=_check_train, func=_train)


def _check_train(args) -> dict:
    """Before TensorFlow: the config, its corpus and tokenizer paths (and the model a fine-tuning
    run starts from), the run folder's own config, the settings of several workers."""
    from keras_transformer.cli.common import CommandError
    from keras_transformer.training import workers
    from keras_transformer.training.inputs import check_inputs
    from keras_transformer.training.run_config import TrainingConfig
    from keras_transformer.training.run_dir import check_same_run

    run = args.run or os.path.join("runs", pathlib.Path(args.config).stem)
    try:
        overrides = [*args.overrides, *([f"data.shards={args.shards}"] if args.shards else [])]
        if args.init_from:
            overrides.append(f"training.init_from={args.init_from}")
        if args.tokenizer:
            overrides.append(f"data.tokenizer={args.tokenizer}")
        config = TrainingConfig.load(args.config, overrides)
        check_inputs(config)
        check_same_run(config, run)
    except (FileNotFoundError, ValueError) as error:
        raise CommandError(str(error)) from error
    workers.check_multi_worker_config(config)
    return {"config": config, "run": run}


def _train(args, config, run):
    from keras_transformer.training import train
    from keras_transformer.training.backup import TrainingInterrupted

    start = time.perf_counter()
    try:
        train(config, run)
    except TrainingInterrupted as stop:
        print(f"keras-transformer train: {stop}", file=sys.stderr)
        return 128 + signal.SIGTERM  # the shell's status for a process ended by SIGTERM
    print(f"Run finished in {(time.perf_counter() - start) / 60:.1f} min: {run}")


def add_average(commands, parent):
    p = commands.add_parser(
        "average",
        parents=[parent],
        help="average the last N checkpoints of "
        "a run (paper section 6.1), N given or chosen on validation BLEU",
    )
    p.add_argument("--run", required=True)
    how = p.add_mutually_exclusive_group()
    how.add_argument("--last", type=int, default=None, help="average the last N (default 5)")
    how.add_argument(
        "--choose-on-val",
        action="store_true",
        help="try each of --candidates on --src/--ref (validation data) and keep the "
        "best; writes RUN/average_choice.json",
    )
    p.add_argument("--src", help="validation sources (with --choose-on-val)")
    p.add_argument("--ref", help="validation references (with --choose-on-val)")
    p.add_argument("--candidates", type=int, nargs="+", default=[1, 2, 3, 5])
    p.add_argument(
        "--beam-size", type=int, default=1, help="decoding for --choose-on-val (default 1: greedy)"
    )
    p.add_argument(
        "--output", default=None, help="output .keras file with --last (default RUN/averaged.keras)"
    )
    p.set_defaults(check=_check_average, func=_average)


def _check_average(args) -> dict:
    """Before TensorFlow: the run folder and, to choose on validation, its data."""
    from keras_transformer.cli.common import CommandError, parallel_lines
    from keras_transformer.training.run_dir import check_run_dir

    check_run_dir(args.run)
    if not args.choose_on_val:
        return {}
    if not (args.src and args.ref):
        raise CommandError("--choose-on-val needs --src and --ref (validation data)")
    if args.output:
        raise CommandError("--output goes with --last; --choose-on-val writes RUN/averaged.keras")
    sources, references = parallel_lines(args.src, args.ref)
    return {"validation": (sources, references)}


def _average(args, validation=None):
    from keras_transformer.training import average_checkpoints, choose_average

    if validation is None:
        average_checkpoints(args.run, 5 if args.last is None else args.last, args.output)
        return
    sources, references = validation
    choose_average(args.run, sources, references, args.candidates, beam_size=args.beam_size)


def add_bleu_curve(commands, parent):
    p = commands.add_parser(
        "bleu-curve",
        parents=[parent],
        help="BLEU of every checkpoint of a run against its training minutes (CSV)",
        description="Scores each kept checkpoint alone (no averaging) and "
        "writes checkpoint,train_minutes,bleu,chrf rows; "
        "scripts/plot_results.py --bleu-csv draws them.",
    )
    p.add_argument("--run", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--output", required=True, help="CSV file, e.g. results/bleu_curve.csv")
    p.add_argument("--dtype", default=None, help="decode under this Keras dtype policy")
    group = p.add_argument_group("search (the run's search section)")
    add_flags(group, SearchSettings, "the run")
    p.set_defaults(check=_check_bleu_curve, func=_bleu_curve)


def _check_bleu_curve(args) -> dict:
    """Before TensorFlow: the run folder and the test data."""
    from keras_transformer.cli.common import parallel_lines
    from keras_transformer.training.run_dir import check_run_dir

    check_run_dir(args.run)
    sources, references = parallel_lines(args.src, args.ref)
    return {"sources": sources, "references": references}


def run_settings(args, sections=("search",)) -> list:
    """The run config's ``sections`` (``search``, ``export``: settings objects), read once, each
    with the flags given of its class applied; a bad value is a ``CommandError`` naming the
    config file or the field."""
    from keras_transformer.cli.common import CommandError
    from keras_transformer.training.run_config import TrainingConfig
    from keras_transformer.training.run_dir import RUN_CONFIG

    path = pathlib.Path(args.run) / RUN_CONFIG
    try:
        config = TrainingConfig.load(path) if path.is_file() else TrainingConfig()
        found = [getattr(config, section) for section in sections]
        return [settings.replace(**given_flags(args, type(settings))) for settings in found]
    except ValueError as error:  # names the run's config or the field
        raise CommandError(str(error)) from error


def _bleu_curve(args, sources, references):
    from keras_transformer.training import bleu_curve

    (search,) = run_settings(args)
    bleu_curve(
        args.run, sources, references, args.output, dtype=args.dtype, **dataclasses.asdict(search)
    )


def add_attention(commands, parent):
    p = commands.add_parser(
        "attention", parents=[parent], help="plot the attention weights of one sentence"
    )
    p.add_argument("--run", required=True, help="run directory (model and tokenizer)")
    p.add_argument("--weights", default=None)
    p.add_argument("--text", required=True)
    p.add_argument("--layer", type=int, default=-1)
    p.add_argument("--output", required=True, help="PNG file")
    p.set_defaults(check=lambda args: check_run(args.run, args.weights), func=_attention)


def _attention(args, weights):
    from keras_transformer import plotting

    model, tokenizer = load_run(args.run, weights)
    plotting.plot_sentence_attention(
        model, tokenizer, args.text, layer=args.layer, output=args.output
    )
    print(f"Wrote {args.output}")


def _load_tokenizer(path):
    from keras_transformer.quiet import dropping_noise
    from keras_transformer.text.tokenizer import SubwordTokenizer

    with dropping_noise():
        return SubwordTokenizer.load(path)


def check_run(run, weights=None) -> dict:
    """``{"weights": path or None}`` for :func:`load_run`, after checking (without TensorFlow)
    that ``run`` is a run folder with a tokenizer and that the weights file exists."""
    from keras_transformer.training.run_dir import (
        AVERAGED_FILE,
        TOKENIZER_DIR,
        NotARunDirectoryError,
        check_run_dir,
    )

    run = pathlib.Path(run)
    if not (run / TOKENIZER_DIR).is_dir():
        check_run_dir(run)
        raise NotARunDirectoryError(f"{run}: the run has no {TOKENIZER_DIR}/ folder")
    if weights == "averaged":
        weights = run / AVERAGED_FILE
    if weights is not None and not pathlib.Path(weights).is_file():
        raise FileNotFoundError(f"{weights}: no such weights file")
    return {"weights": weights}


def load_run(run, weights=None):
    """The model and tokenizer of a run directory; ``weights`` as for ``export --weights``:
    ``"averaged"`` (``RUN/averaged.keras``), a ``.keras`` or ``.weights.h5`` file, or ``None``
    (the final model, else the last checkpoint)."""
    import keras

    from keras_transformer.training import TOKENIZER_DIR, load_run_model

    run = pathlib.Path(run)
    weights = check_run(run, weights)["weights"]
    if weights is not None and str(weights).endswith(".keras"):
        model = keras.models.load_model(weights, compile=False)
    else:
        model = load_run_model(run, weights=weights)
    return model, _load_tokenizer(run / TOKENIZER_DIR)
