"""The layout of a run directory: what ``train`` writes where, the check that a folder is one, and
the check that a config is the run's own (``check_same_run``). No TensorFlow here.

A run directory holds ``config.yaml`` (the whole TrainingConfig, vocabulary sizes filled in),
``tokenizer/``, ``checkpoints/ckpt-<step>.weights.h5`` (the last N), ``backup/`` while training,
``logs/`` (TensorBoard), ``history.csv``, ``model.keras`` and, last, ``finished.json`` (the
updates made; the date, CPU and commit that finished them); ``averaged.keras`` once
``keras-transformer average`` ran.
"""

from __future__ import annotations

import dataclasses
import glob
import pathlib
import re

from keras_transformer.text.vocabulary import TOKENIZER_DIR
from keras_transformer.training.run_config import TrainingConfig

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
    "check_same_run",
    "checkpoint_step",
    "list_checkpoints",
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


def check_same_run(config: TrainingConfig, run_dir) -> None:
    """Raises ``ValueError`` if ``run_dir`` holds a run started with other data or model settings.

    Calling ``train`` again on a run directory resumes it, or reloads it once finished; with a
    different corpus, vocabulary or architecture that would silently give the old run's model.
    Training settings (``max_steps``, ``max_minutes``, ``keep_checkpoints``, ...) may change
    between calls. A run's ``config.yaml`` written under the old key names (``max_length``)
    compares equal to the same settings under the new ones.
    """
    path = pathlib.Path(run_dir) / RUN_CONFIG
    if not path.exists():
        return
    saved = TrainingConfig.load(path)
    diffs = [
        f"data.{key}: {value!r} in the run, {getattr(config.data, key)!r} now"
        for key, value in dataclasses.asdict(saved.data).items()
        if getattr(config.data, key) != value
    ]
    vocab = saved.model.source_vocab_size
    if vocab is not None and not diffs:  # the run's model section has every field filled in
        in_run = saved.model.overrides()
        wanted = config.model_config(int(vocab)).to_dict()
        diffs += [
            f"model.{key}: {in_run[key]!r} in the run, {value!r} now"
            for key, value in wanted.items()
            if key in in_run and in_run[key] != value
        ]
    if diffs:
        raise ValueError(
            f"{run_dir} was started with other settings ({'; '.join(diffs)}): use a "
            f"new run directory, or the run's own {path} to resume it"
        )


def list_checkpoints(directory) -> list[pathlib.Path]:
    """Complete checkpoints in step order (half-written ``.tmp`` files are left out)."""
    paths = [pathlib.Path(p) for p in glob.glob(str(pathlib.Path(directory) / "ckpt-*.weights.h5"))]
    paths = [p for p in paths if re.fullmatch(r"ckpt-\d+\.weights\.h5", p.name)]
    return sorted(paths, key=checkpoint_step)


def checkpoint_step(path) -> int:
    """The optimizer step of a checkpoint file: ``ckpt-00000120.weights.h5`` -> 120."""
    return int(pathlib.Path(path).name.split("-")[1].split(".")[0])
