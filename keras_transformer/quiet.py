"""Quiet start-up for the command line: TensorFlow's C++ start-up lines are hidden unless asked.

TensorFlow 2.21 prints its oneDNN, CUDA stub and CPU-feature lines while its libraries load,
through absl logging before ``absl::InitializeLog()``: ``TF_CPP_MIN_LOG_LEVEL`` hides the later
ones (XLA service, StreamExecutor) but not those. So :func:`quiet_start` sets the level and imports
TensorFlow with file descriptor 2 captured, then writes back whatever is not a known start-up
line. tensorflow-text's bundled SentencePiece writes "precompiled_charsmap is empty" to
``std::cerr`` each time a tokenizer with the identity normalization is created (its own logger,
which no environment variable reaches): wrap such loads in :func:`dropping_noise`.

Nothing is hidden when the user set ``TF_CPP_MIN_LOG_LEVEL`` or passed ``--verbose``.

In the ``keras-transformer`` command (:func:`is_command_line`: the console scripts, or
``python -m keras_transformer.cli``) the package's ``__init__`` imports no TensorFlow: the
command parses its arguments, calls :func:`quiet_start`, then :func:`import_library`. A program
or notebook that imports the library sees TensorFlow's output as usual. This module imports
nothing from TensorFlow.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import sys
import tempfile

LOG_LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
QUIET_LEVEL = "2"  # hide INFO and WARNING, keep ERROR and FATAL
# Substrings of the start-up lines that carry nothing for a user of the command line.
NOISE = (
    "All log messages before absl::InitializeLog() is called",
    "oneDNN custom operations are on",
    "cudart_stub.cc",
    "cpu_feature_guard.cc",
    "To enable the following instructions:",
    "failed call to cuInit",
    "Unable to register cu",
    "computation_placer.cc",
    "precompiled_charsmap is empty",
    "oneDNN supports DT_INT64 only",
)

_state = {"quiet": False}


def is_noise(line: str) -> bool:
    """Whether ``line`` is one of TensorFlow's or SentencePiece's known start-up lines.

    >>> is_noise("I0000 00:00:17.4 4134 cpu_feature_guard.cc:227] This TensorFlow binary ...")
    True
    >>> is_noise("error: runs/x is not a run directory")
    False
    """
    return any(marker in line for marker in NOISE)


def quiet_start(verbose: bool = False, environ=os.environ) -> bool:
    """Makes this process quiet: sets ``TF_CPP_MIN_LOG_LEVEL``; returns whether it did.

    Call it before anything imports TensorFlow, then :func:`import_tensorflow`. Does nothing
    with ``verbose`` or when ``TF_CPP_MIN_LOG_LEVEL`` is already set (the user's choice wins).
    """
    if verbose or LOG_LEVEL_VARIABLE in environ:
        return False
    environ[LOG_LEVEL_VARIABLE] = QUIET_LEVEL
    _state["quiet"] = True
    return True


COMMANDS = ("keras-transformer", "keras-transformer-prepare")
MODULES = ("keras_transformer.cli", "pipelines.prepare")


def is_command_line(argv=None, orig_argv=None) -> bool:
    """Whether this process is the ``keras-transformer`` command.

    >>> is_command_line(["/venv/bin/keras-transformer", "train"], [])
    True
    >>> is_command_line(["-m"], ["python", "-m", "keras_transformer.cli", "train"])
    True
    >>> is_command_line(["script.py"], ["python", "script.py"])
    False
    """
    argv = sys.argv if argv is None else argv
    orig_argv = getattr(sys, "orig_argv", []) if orig_argv is None else orig_argv
    if argv and pathlib.Path(argv[0]).name in COMMANDS:
        return True
    return any(a == "-m" and b in MODULES for a, b in zip(orig_argv, orig_argv[1:]))


def import_tensorflow() -> None:
    """Imports TensorFlow and finds its devices, dropping the start-up lines when quiet."""
    with dropping_noise():
        import tensorflow as tf

        tf.config.list_physical_devices("GPU")  # CUDA's "failed call to cuInit" comes here


def import_library() -> None:
    """For the command line, after parsing its arguments: TensorFlow (:func:`import_tensorflow`),
    then what ``import keras_transformer`` imports in a program (``keras_transformer._api``: the
    public names, and every class ``.keras`` loading needs registered)."""
    import_tensorflow()
    with dropping_noise():
        import keras_transformer._api  # noqa: F401


@contextlib.contextmanager
def dropping_noise():
    """Captures file descriptor 2 for the block and then writes back every line that is not a
    known start-up line (:data:`NOISE`); if the block raises, writes everything back.

    Does nothing unless :func:`quiet_start` made this process quiet.
    """
    if not _state["quiet"]:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    failed = False
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode("utf-8", errors="replace")
            kept = (
                text
                if failed
                else "".join(line for line in text.splitlines(keepends=True) if not is_noise(line))
            )
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()
