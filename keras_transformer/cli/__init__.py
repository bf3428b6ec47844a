"""The ``keras-transformer`` console script: prepare, train, average, bleu-curve, export,
translate, evaluate, attention.

Each subcommand calls the library function of the same job with the same names
(``keras_transformer.training``, ``keras_transformer.inference``, ``pipelines.prepare``). Output is
quiet by default (see ``keras_transformer.cli.quiet``): ``--verbose`` or a ``TF_CPP_MIN_LOG_LEVEL``
of your own shows TensorFlow's start-up lines. Inputs a user can fix (a missing config or file, an
unknown config key, a folder that is not a run directory or not a SavedModel) end the command with
a one-line message and exit status 2; ``--verbose`` shows the traceback too. A subcommand's
``check`` (a parser default beside ``func``) finds them before TensorFlow loads, importing only
modules without it; what it read goes to ``func`` as keywords.
"""

from __future__ import annotations

import argparse
import sys

from keras_transformer.cli.ablate_commands import add_ablate
from keras_transformer.cli.common import CommandError, common_options, read_lines
from keras_transformer.cli.export_commands import add_export
from keras_transformer.cli.run_commands import (
    add_attention,
    add_average,
    add_bleu_curve,
    add_prepare,
    add_train,
    load_run,
)
from keras_transformer.cli.service_commands import add_data_service
from keras_transformer.cli.text_commands import add_evaluate, add_translate
from keras_transformer.quiet import import_library, quiet_start

__all__ = [
    "CommandError",
    "build_parser",
    "load_run",
    "main",
    "read_lines",
]

PROG = "keras-transformer"
DESCRIPTION = (
    "The Transformer of 'Attention Is All You Need': prepare a corpus, train, average "
    "checkpoints, export a SavedModel, translate and evaluate. Quiet unless --verbose "
    "(or your own TF_CPP_MIN_LOG_LEVEL); a bad input is one line and exit status 2."
)
SUBCOMMANDS = (
    add_prepare,
    add_train,
    add_average,
    add_bleu_curve,
    add_export,
    add_translate,
    add_evaluate,
    add_attention,
    add_data_service,
    add_ablate,
)


def build_parser() -> argparse.ArgumentParser:
    parent = common_options()
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION, parents=[parent])
    commands = parser.add_subparsers(dest="command", required=True)
    for add in SUBCOMMANDS:
        add(commands, parent)
    return parser


def _user_error(error: BaseException) -> bool:
    """Errors that name a bad input: a one-line message is enough."""
    from keras_transformer.text.lines import DataError
    from keras_transformer.training.workers import WorkerSettingsError

    return isinstance(error, (CommandError, FileNotFoundError, DataError, WorkerSettingsError))


def main(argv=None) -> int:
    """Runs one subcommand; returns the exit status (0, or 2 for a bad input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in argv
    quiet_start(verbose)  # before anything imports TensorFlow
    args = build_parser().parse_args(argv)  # --help and usage errors end here, without TensorFlow
    try:
        # The inputs a user can get wrong (files, folders, the config) are checked before
        # TensorFlow loads: a bad one ends the command at once.
        checked = args.check(args) if hasattr(args, "check") else {}
        import_library()
        status = args.func(args, **checked)
    except Exception as error:
        if verbose or not _user_error(error):
            raise
        print(f"{PROG} {args.command}: error: {error}", file=sys.stderr)
        return 2
    return int(status or 0)
