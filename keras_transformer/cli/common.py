"""What the subcommands share: the error a user can fix, reading text lines, checking inputs."""

from __future__ import annotations

import argparse
import pathlib
import sys


class CommandError(Exception):
    """A bad input the user can fix: the command prints the message on one line and exits 2."""


def common_options() -> argparse.ArgumentParser:
    """Options every subcommand takes (a parent parser)."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--verbose",
        action="store_true",
        help="show TensorFlow's start-up log lines and full tracebacks",
    )
    return parent


def read_lines(path) -> list[str]:
    """Lines of ``path`` (``-`` is stdin); a missing or non-UTF-8 file ends the command with a
    message naming it."""
    from keras_transformer.text.lines import DataError
    from keras_transformer.text.lines import read_lines as read_file_lines

    if path == "-":
        return [line.rstrip("\n") for line in sys.stdin]
    try:
        return read_file_lines(path)
    except FileNotFoundError as error:
        raise CommandError(f"{path}: no such file") from error
    except DataError as error:
        raise CommandError(str(error)) from error


def require_saved_model(path) -> pathlib.Path:
    """``path`` if it is a SavedModel folder, else a ``CommandError`` naming it."""
    path = pathlib.Path(path)
    if not (path / "saved_model.pb").is_file():
        why = "no such folder" if not path.exists() else "no saved_model.pb"
        raise CommandError(
            f"{path} is not a SavedModel folder ({why}); `keras-transformer export` writes one"
        )
    return path


def parallel_lines(source_path, reference_path) -> tuple[list[str], list[str]]:
    """Sources and references, which must have the same number of lines."""
    sources, references = read_lines(source_path), read_lines(reference_path)
    if len(sources) != len(references):
        raise CommandError(
            f"{source_path} has {len(sources)} lines but {reference_path} has {len(references)}"
        )
    return sources, references
