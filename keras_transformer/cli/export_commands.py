"""``keras-transformer export``: a run's model as a SavedModel with the tokenizer inside, or as a
CTranslate2 folder; the search settings default to the run config's ``search`` section."""

from __future__ import annotations

import pathlib

from keras_transformer.cli.run_commands import _load_tokenizer, check_run, load_run


def add_export(commands, parent):
    p = commands.add_parser(
        "export",
        parents=[parent],
        help="export a run as a SavedModel (or a CTranslate2 model) that translates raw text",
        description="Writes the folder beside --output and renames it into place, so a killed "
        "export never leaves a half-written folder there.",
    )
    p.add_argument("--run", required=True)
    p.add_argument("--output", required=True, help="e.g. saved_models/multi30k_en_de")
    p.add_argument(
        "--format",
        choices=("saved_model", "ctranslate2"),
        default="saved_model",
        help="saved_model (TensorFlow, default) or ctranslate2 (the CTranslate2 engine; needs "
        "the [ctranslate2] extra)",
    )
    p.add_argument(
        "--quantization",
        choices=("float32", "int16", "int8"),
        default="float32",
        help="weight type of a ctranslate2 export (default float32)",
    )
    p.add_argument(
        "--weights",
        default=None,
        help="'averaged' (RUN/averaged.keras), a .keras or "
        ".weights.h5 file; default: the final model",
    )
    _add_export_settings(p)
    p.set_defaults(check=_check_export, func=_export)


def _add_search_settings(p):
    """``--beam-size`` / ``--alpha``: left out, the run config's ``search`` section."""
    default = "default: the run's search.{}, else {}"
    beam = f"1 is greedy decoding ({default.format('beam_size', 4)})"
    p.add_argument("--beam-size", type=int, default=None, help=beam)
    alpha = f"GNMT length penalty ({default.format('alpha', 0.6)})"
    p.add_argument("--alpha", type=float, default=None, help=alpha)


def _add_export_settings(p):
    """The serving settings of either export format (``export_translator``'s keywords)."""
    _add_search_settings(p)
    p.add_argument(
        "--max-extra-length",
        type=int,
        default=50,
        help="output cap: source length + this many subwords",
    )
    p.add_argument(
        "--max-output-length",
        type=int,
        default=None,
        help="absolute output cap in subwords (default: none beyond the model's table)",
    )
    p.add_argument(
        "--max-source-length",
        type=int,
        default=None,
        help="source subwords kept (default: the model's positional table)",
    )
    p.add_argument(
        "--target-tokenizer",
        default=None,
        help="tokenizer folder of the target side (default: the run's shared one)",
    )
    p.add_argument(
        "--max-input-chars",
        type=int,
        default=None,
        help="characters of each input kept before tokenizing",
    )
    _add_search_switches(p)
    p.add_argument(
        "--max-batch-tokens",
        type=int,
        default=4096,
        help="search a request in sub-batches of at most this many source subwords, so a large "
        "request has bounded memory (default 4096; 0: no limit)",
    )
    p.add_argument(
        "--dtype",
        default=None,
        help="serve under this Keras dtype policy, e.g. bfloat16; default: the model's own",
    )


def _add_search_switches(p):
    """The SavedModel search's speed switches (each gives the same outputs as the plain form)."""
    p.add_argument("--jit-compile", action="store_true", help="XLA-compile the search loop")
    p.add_argument(
        "--xla-max-batch",
        type=int,
        default=None,
        metavar="N",
        help="XLA-compile the search of requests of up to N sentences (float32; a compile per "
        "batch size)",
    )
    p.add_argument(
        "--keep-finished",
        action="store_true",
        help="the plain search loop: finished sentences stay in the batch until the last ends",
    )
    p.add_argument(
        "--repeat-cross-cache",
        action="store_true",
        help="the plain beam search: each hypothesis gets its own copy of its sentence's "
        "encoder-decoder keys/values (default: one copy per sentence, the same outputs)",
    )


def _check_ctranslate2_flags(args):
    from keras_transformer.cli.common import CommandError

    ignored = [
        flag
        for flag, value in (
            ("--target-tokenizer", args.target_tokenizer),
            ("--jit-compile", args.jit_compile),
            ("--xla-max-batch", args.xla_max_batch),
            ("--keep-finished", args.keep_finished),
            ("--repeat-cross-cache", args.repeat_cross_cache),
            ("--dtype", args.dtype),
        )
        if value
    ]
    if ignored:
        raise CommandError(f"--format ctranslate2 does not take {', '.join(ignored)}")


def _export_ctranslate2(args, model, tokenizer, search):
    from keras_transformer.cli.common import CommandError
    from keras_transformer.serving import export_ctranslate2

    try:
        import ctranslate2  # noqa: F401
    except ImportError as error:
        raise CommandError(
            "--format ctranslate2 needs the ctranslate2 package: "
            "pip install 'keras-transformer[ctranslate2]'"
        ) from error
    try:
        export_ctranslate2(
            model,
            tokenizer,
            args.output,
            quantization=args.quantization,
            **search,
        )
    except ValueError as error:  # a model CTranslate2 cannot run (attention_window, key_dim)
        raise CommandError(f"--format ctranslate2: {error}") from error


def _search_settings(args) -> dict:
    """The export options both formats take: the search (``--beam-size`` / ``--alpha``, else the
    run config's ``search`` section) and the input limits."""
    from keras_transformer.training.run_config import SearchSettings, TrainingConfig
    from keras_transformer.training.run_dir import RUN_CONFIG

    path = pathlib.Path(args.run) / RUN_CONFIG
    search = TrainingConfig.load(path).search if path.is_file() else SearchSettings()
    return dict(
        beam_size=search.beam_size if args.beam_size is None else args.beam_size,
        alpha=search.alpha if args.alpha is None else args.alpha,
        max_extra_length=args.max_extra_length,
        max_output_length=args.max_output_length,
        max_source_length=args.max_source_length,
        max_input_chars=args.max_input_chars,
    )


def _check_export(args) -> dict:
    """Before TensorFlow: the output folder, the flags of the format, the run and its weights."""
    from keras_transformer.cli.common import CommandError
    from keras_transformer.serving.atomic import check_destination

    try:
        check_destination(args.output)
    except FileExistsError as error:
        raise CommandError(str(error)) from error
    if args.format != "ctranslate2" and args.quantization != "float32":
        raise CommandError("--quantization goes with --format ctranslate2")
    if args.format == "ctranslate2":
        _check_ctranslate2_flags(args)
    return {**check_run(args.run, args.weights), "search": _search_settings(args)}


def _export(args, weights, search):
    from keras_transformer.export import export_translator

    model, tokenizer = load_run(args.run, weights)
    if args.format == "ctranslate2":
        _export_ctranslate2(args, model, tokenizer, search)
        print(f"Exported to {args.output} (CTranslate2, {args.quantization})")
        return
    target_tokenizer = None
    if args.target_tokenizer:
        target_tokenizer = _load_tokenizer(args.target_tokenizer)
    export_translator(
        model,
        tokenizer,
        args.output,
        **search,
        target_tokenizer=target_tokenizer,
        jit_compile=args.jit_compile,
        xla_max_batch=args.xla_max_batch,
        drop_finished=not args.keep_finished,
        share_cross_cache=not args.repeat_cross_cache,
        dtype=args.dtype,
        max_batch_tokens=args.max_batch_tokens or None,
    )
    print(f"Exported to {args.output}")
