"""``keras-transformer export``: a run's model as a SavedModel with the tokenizer inside, or as a
CTranslate2 folder. Each setting left out on the command line comes from the run config's
``search`` (beam, alpha) and ``export`` sections (``TrainingConfig``), else their defaults."""

from __future__ import annotations

import argparse
import dataclasses
import pathlib

from keras_transformer.cli.run_commands import _load_tokenizer, check_run, load_run
from keras_transformer.training.run_config import EXPORT_FORMATS, QUANTIZATIONS


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
        choices=EXPORT_FORMATS,
        default=None,
        help="saved_model (TensorFlow) or ctranslate2 (the CTranslate2 engine; needs the "
        "[ctranslate2] extra); default: the run's export.format, else saved_model",
    )
    p.add_argument(
        "--quantization",
        choices=QUANTIZATIONS,
        default=None,
        help="weight type of a ctranslate2 export (default: export.quantization, else float32)",
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
        default=None,
        help="output cap: source length + this many subwords (default: export.max_extra_length, "
        "else 50)",
    )
    p.add_argument(
        "--max-output-length",
        type=int,
        default=None,
        help="absolute output cap in subwords (0: none beyond the model's table, the default)",
    )
    p.add_argument(
        "--max-source-length",
        type=int,
        default=None,
        help="source subwords kept (0: the model's positional table, the default)",
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
        help="characters of each input kept before tokenizing (0: 32 x the source subwords)",
    )
    _add_search_switches(p)
    p.add_argument(
        "--max-batch-tokens",
        type=int,
        default=None,
        help="search a request in sub-batches of at most this many source subwords, so a large "
        "request has bounded memory (default: export.max_batch_tokens, else 4096; 0: no limit)",
    )
    p.add_argument(
        "--dtype",
        default=None,
        help="serve under this Keras dtype policy, e.g. bfloat16 or float32; default: "
        "export.dtype, else the model's own",
    )


def _add_search_switches(p):
    """The SavedModel search's speed switches (each gives the same outputs as the plain form);
    each goes both ways, so a flag can undo the run config's ``export`` section."""
    p.add_argument(
        "--jit-compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="XLA-compile the search loop (default: export.jit_compile, else no)",
    )
    p.add_argument(
        "--xla-max-batch",
        type=int,
        default=None,
        metavar="N",
        help="XLA-compile the search of requests of up to N sentences (float32; a compile per "
        "batch size; 0: none, the default)",
    )
    drop = "finished sentences leave the batch as the search goes (the default)"
    keep = "the plain search loop: finished sentences stay in the batch until the last ends"
    _add_pair(p, "drop_finished", ("--drop-finished", drop), ("--keep-finished", keep))
    share = "beam search: one copy of the encoder-decoder keys/values per sentence (the default)"
    repeat = "the plain beam search: a copy per hypothesis (the same outputs)"
    pair = ("--share-cross-cache", share), ("--repeat-cross-cache", repeat)
    _add_pair(p, "share_cross_cache", *pair)


def _add_pair(p, dest, on, off):
    """Flags ``(name, help)`` that set ``dest`` True and False; neither: ``None`` (the config)."""
    group = p.add_mutually_exclusive_group()
    for (flag, text), value in ((on, True), (off, False)):
        group.add_argument(flag, dest=dest, action="store_const", const=value, help=text)
    p.set_defaults(**{dest: None})


# The SavedModel-only settings: (flag, export field).
_SAVED_MODEL_ONLY = (
    ("--jit-compile", "jit_compile"),
    ("--xla-max-batch", "xla_max_batch"),
    ("--keep-finished", "drop_finished"),  # or --drop-finished
    ("--repeat-cross-cache", "share_cross_cache"),  # or --share-cross-cache
    ("--dtype", "dtype"),
)


def _settings(args) -> dict:
    """The export's settings, ``{"export": ExportSettings, "search": {beam_size, alpha}}``: the
    flags given, else the run config's ``export`` and ``search`` sections, else their defaults."""
    from keras_transformer.cli.common import CommandError
    from keras_transformer.training.run_config import ExportSettings, TrainingConfig
    from keras_transformer.training.run_dir import RUN_CONFIG

    path = pathlib.Path(args.run) / RUN_CONFIG
    try:
        config = TrainingConfig.load(path) if path.is_file() else TrainingConfig()
    except ValueError as error:  # the run's config names itself and the field
        raise CommandError(str(error)) from error
    # Each setting's flag stores under the field's name (the switch pairs included).
    flags = {field.name: getattr(args, field.name) for field in dataclasses.fields(ExportSettings)}
    given = {name: value for name, value in flags.items() if value is not None}
    try:
        export = dataclasses.replace(config.export, **given)
    except ValueError as error:
        raise CommandError(str(error)) from error
    export = _check_format(export, given, args.target_tokenizer, path)
    search = config.search
    beam = search.beam_size if args.beam_size is None else args.beam_size
    alpha = search.alpha if args.alpha is None else args.alpha
    return {"export": export, "search": dict(beam_size=beam, alpha=alpha)}


def _check_format(export, given, target_tokenizer, config_path):
    """The settings for the format: one of the other format given as a flag is refused; one
    from the run config is dropped (with a word) when a flag chose the format, and refused when
    the config chose both (it contradicts itself). Errors name the flag or the config field."""
    from keras_transformer.cli.common import CommandError
    from keras_transformer.training.run_config import ExportSettings

    plain = ExportSettings()
    if export.format == "ctranslate2":
        other = list(_SAVED_MODEL_ONLY)
        refused = ["--target-tokenizer"] if target_tokenizer else []
    else:
        other, refused = [("--quantization", "quantization")], []
    dropped = []
    for flag, field in other:
        if getattr(export, field) == getattr(plain, field):
            continue
        if field in given:
            refused.append(flag)
        elif "format" in given:
            dropped.append(f"export.{field}")
            export = dataclasses.replace(export, **{field: getattr(plain, field)})
        else:
            refused.append(f"export.{field} in {config_path}")
    if refused:
        raise CommandError(f"format {export.format} does not take {', '.join(refused)}")
    if dropped:
        print(f"--format {export.format}: not using {', '.join(dropped)} of {config_path}")
    return export


def _export_ctranslate2(args, model, tokenizer, export, search):
    from keras_transformer.cli.common import CommandError
    from keras_transformer.serving import export_ctranslate2

    try:
        import ctranslate2  # noqa: F401
    except ImportError as error:
        raise CommandError(
            "--format ctranslate2 needs the ctranslate2 package: "
            "pip install 'keras-transformer[ctranslate2]'"
        ) from error
    settings = export.ctranslate2_settings()
    try:
        export_ctranslate2(model, tokenizer, args.output, **settings, **search)
    except ValueError as error:  # a model CTranslate2 cannot run (attention_window, key_dim)
        raise CommandError(f"format ctranslate2: {error}") from error


def _check_export(args) -> dict:
    """Before TensorFlow: the output folder, the settings of the format, the run and its
    weights."""
    from keras_transformer.cli.common import CommandError
    from keras_transformer.serving.atomic import check_destination

    try:
        check_destination(args.output)
    except FileExistsError as error:
        raise CommandError(str(error)) from error
    return {**check_run(args.run, args.weights), **_settings(args)}


def _export(args, weights, export, search):
    from keras_transformer.export import export_translator

    model, tokenizer = load_run(args.run, weights)
    if export.format == "ctranslate2":
        _export_ctranslate2(args, model, tokenizer, export, search)
        print(f"Exported to {args.output} (CTranslate2, {export.quantization})")
        return
    target_tokenizer = None
    if args.target_tokenizer:
        target_tokenizer = _load_tokenizer(args.target_tokenizer)
    settings = export.translator_settings()
    export_translator(
        model, tokenizer, args.output, **settings, **search, target_tokenizer=target_tokenizer
    )
    print(f"Exported to {args.output}")
