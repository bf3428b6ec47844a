"""``keras-transformer export``: a run's model as a SavedModel with the tokenizer inside, or as a
CTranslate2 folder. Every setting's flag comes from its field in ``inference/settings.py``; a
flag left out takes the run config's ``search`` and ``export`` sections, else the default."""

from __future__ import annotations

import pathlib

from keras_transformer.cli.run_commands import (
    _load_tokenizer,
    check_run,
    load_run,
    run_settings,
)
from keras_transformer.inference.settings import (
    SearchSettings,
    ServingSettings,
    add_flags,
    flag_of,
    foreign_settings,
    given_flags,
)


def add_export(commands, parent):
    p = commands.add_parser(
        "export",
        parents=[parent],
        help="export a run as a SavedModel (or a CTranslate2 model) that translates raw text",
        description="Writes the folder beside --output and renames it into place, so a killed "
        "export never leaves a half-written folder there. Each setting left out comes from the "
        "run's config.yaml (its search and export sections), else its default.",
    )
    p.add_argument("--run", required=True)
    p.add_argument("--output", required=True, help="e.g. saved_models/multi30k_en_de")
    p.add_argument(
        "--weights",
        default=None,
        help="'averaged' (RUN/averaged.keras), a .keras or "
        ".weights.h5 file; default: the final model",
    )
    p.add_argument(
        "--target-tokenizer",
        default=None,
        help="tokenizer folder of the target side (default: the run's shared one); "
        "saved_model only",
    )
    for klass in (SearchSettings, ServingSettings):
        group = p.add_argument_group(f"the run's {klass.section} section")
        add_flags(group, klass, "the run", exports=True)
    p.set_defaults(check=_check_export, func=_export)


def _settings(args) -> dict:
    """``{"search": SearchSettings, "serving": ServingSettings}``: the flags given, else the
    run config's ``search`` and ``export`` sections, else their defaults."""
    from keras_transformer.training.run_dir import RUN_CONFIG

    search, serving = run_settings(args, ("search", "export"))
    return _check_format(search, serving, args, pathlib.Path(args.run) / RUN_CONFIG)


def _check_format(search, serving, args, config_path):
    """The settings for the format: one the format does not take is refused when a flag gave
    it; from the run config it is dropped (with a word) when a flag chose the format, and
    refused when the config chose both (it contradicts itself)."""
    from keras_transformer.cli.common import CommandError

    given = {**given_flags(args, SearchSettings), **given_flags(args, ServingSettings)}
    refused, dropped = [], []
    if args.target_tokenizer and serving.format == "ctranslate2":
        refused.append("--target-tokenizer")
    foreign = foreign_settings(search, serving)
    for klass, name, value in foreign:
        if name in given:
            refused.append(flag_of(klass, name, value))
        elif "format" in given:
            dropped.append(f"{klass.section}.{name}")
        else:
            refused.append(f"{klass.section}.{name} in {config_path}")
    if refused:
        raise CommandError(f"format {serving.format} does not take {', '.join(refused)}")
    if dropped:
        print(f"--format {serving.format}: not using {', '.join(dropped)} of {config_path}")
        plain = lambda klass: {name: getattr(klass(), name) for k, name, _ in foreign if k is klass}
        search, serving = (
            search.replace(**plain(SearchSettings)),
            serving.replace(**plain(ServingSettings)),
        )
    return {"search": search, "serving": serving}


def _export_ctranslate2(args, model, tokenizer, search, serving):
    from keras_transformer.cli.common import CommandError
    from keras_transformer.inference.ctranslate2 import export_ctranslate2

    try:
        export_ctranslate2(model, tokenizer, args.output, search, serving)
    except ValueError as error:  # a model CTranslate2 cannot run (attention_window, key_dim)
        raise CommandError(f"format ctranslate2: {error}") from error


def _check_export(args) -> dict:
    """Before TensorFlow: the output folder, the settings of the format, the run and its
    weights, and the CTranslate2 package for that format."""
    from keras_transformer.cli.common import CommandError
    from keras_transformer.text.files import check_destination

    try:
        check_destination(args.output)
    except FileExistsError as error:
        raise CommandError(str(error)) from error
    settings = _settings(args)
    if settings["serving"].format == "ctranslate2":
        try:
            import ctranslate2  # noqa: F401
        except ImportError as error:
            raise CommandError(
                "--format ctranslate2 needs the ctranslate2 package: "
                "pip install 'keras-transformer[ctranslate2]'"
            ) from error
    members = _check_ensemble(args, settings["serving"].ensemble)
    return {**check_run(args.run, args.weights), "members": members, **settings}


def _check_ensemble(args, runs) -> list:
    """The weights of each ensemble run (``--ensemble``, else the run config's
    ``export.ensemble``), after checking that its tokenizer is the one of ``--run`` (the same
    SentencePiece model: the same vocabulary, id for id)."""
    from keras_transformer.cli.common import CommandError
    from keras_transformer.text.sentencepiece_file import read_model_proto
    from keras_transformer.training.run_dir import TOKENIZER_DIR

    members = []
    first = read_model_proto(pathlib.Path(args.run) / TOKENIZER_DIR) if runs else None
    for run in runs:
        members.append(check_run(run, args.weights)["weights"])
        if read_model_proto(pathlib.Path(run) / TOKENIZER_DIR) != first:
            raise CommandError(
                f"--ensemble {run}: its tokenizer is not the one of --run {args.run}; an "
                "ensemble's members share one vocabulary (train them with "
                f"data.tokenizer={pathlib.Path(args.run) / TOKENIZER_DIR})"
            )
    return members


def _export(args, weights, members, search, serving):
    from keras_transformer.inference.saved_model import export_translator

    model, tokenizer = load_run(args.run, weights)
    ensemble = [load_run(run, w)[0] for run, w in zip(serving.ensemble, members, strict=True)]
    if serving.format == "ctranslate2":
        _export_ctranslate2(args, model, tokenizer, search, serving)
        print(f"Exported to {args.output} (CTranslate2, {serving.quantization})")
        return
    target_tokenizer = None
    if args.target_tokenizer:
        target_tokenizer = _load_tokenizer(args.target_tokenizer)
    export_translator(
        model,
        tokenizer,
        args.output,
        target_tokenizer=target_tokenizer,
        search=search,
        serving=serving.replace(ensemble=()),  # the runs, loaded: the models of `ensemble`
        ensemble=ensemble,
    )
    size = f" (an ensemble of {1 + len(ensemble)} models)" if ensemble else ""
    print(f"Exported to {args.output}{size}")
