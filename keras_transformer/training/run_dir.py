"""The layout of a run directory: what ``train`` writes where, and the check that a folder is one.

A run directory holds ``config.yaml`` (the whole TrainingConfig, vocabulary sizes filled in),
``tokenizer/``, ``checkpoints/ckpt-<step>.weights.h5`` (the last N), ``backup/`` while training,
``logs/`` (TensorBoard), ``history.csv``, ``model.keras`` and, last, ``finished.json``;
``averaged.keras`` once ``keras-transformer average`` ran.
"""

from __future__ import annotations

import pathlib

from keras_transformer.tokenization import TOKENIZER_DIR

__all__ = [
    "AVERAGED_FILE",
    "BACKUP_DIR",
    "CHECKPOINT_DIR",
    "CHECKPOINT_PATTERN",
    "FINISHED_FILE",
    "HISTORY_FILE",
    "MODEL_FILE",
    "NotARunDirectoryError",
    "RUN_CONFIG",
    "TOKENIZER_DIR",
    "check_run_dir",
]

RUN_CONFIG = "config.yaml"  # the whole TrainingConfig, vocabulary sizes filled in
MODEL_FILE = "model.keras"  # final weights with the architecture (compiled)
AVERAGED_FILE = "averaged.keras"  # the average of the last checkpoints (keras-transformer average)
CHECKPOINT_DIR = "checkpoints"
CHECKPOINT_PATTERN = "ckpt-{step:08d}.weights.h5"
BACKUP_DIR = "backup"  # the state a killed run resumes from (training/backup.py)
HISTORY_FILE = "history.csv"  # one row per epoch (CSVLogger)
FINISHED_FILE = "finished.json"  # written last: a rerun of a finished run does not train again


class NotARunDirectoryError(FileNotFoundError):
    """A folder that ``train`` did not write (no ``config.yaml`` nor ``model.keras``)."""


def check_run_dir(run_dir) -> pathlib.Path:
    """Returns ``run_dir`` as a path; raises :class:`NotARunDirectoryError` naming it if it holds
    neither ``config.yaml`` nor ``model.keras``."""
    run_dir = pathlib.Path(run_dir)
    if not run_dir.is_dir():
        raise NotARunDirectoryError(f"{run_dir}: no such run directory")
    if not (run_dir / RUN_CONFIG).is_file() and not (run_dir / MODEL_FILE).is_file():
        raise NotARunDirectoryError(
            f"{run_dir} is not a run directory (no {RUN_CONFIG} or "
            f"{MODEL_FILE}; `keras-transformer train` writes them)"
        )
    return run_dir
