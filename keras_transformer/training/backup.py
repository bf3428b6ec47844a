"""Backups that a killed run resumes from exactly: every N batches, at each epoch end, on SIGTERM.

Keras' ``BackupAndRestore`` restores weights and optimizer at an epoch boundary only: the layers'
dropout seed states, the metrics of the epoch under way and the position in the input stream are
lost, so a resumed run trains on other batches with other dropout masks than an uninterrupted
one. A backup here holds every variable of the run (``model.variables``, which includes the
seed-generator states, the optimizer's, and the compiled metrics' ``metrics_variables``) with
the number of batches consumed, the epoch and the training time spent. ``train`` resumes at that
very batch: the deterministic input pipeline skips the consumed batches (``fit_segments``).

On disk: ``backup/batch-<n>/`` with ``variables.npz`` and ``state.json``, written under
``backup/.batch-<n>.tmp-*`` and renamed (``keras_transformer/text/files.py``), so a kill during a
write leaves the earlier backup whole; the last two are kept, and one that fails to load (or
names other variables) falls back to the one before it, with a warning.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import threading
import time
import warnings
import zipfile

import keras
import numpy as np

from keras_transformer.text.files import atomic_path, atomic_write_text

__all__ = [
    "RunBackup",
    "RunClock",
    "TrainingInterrupted",
    "fit_segments",
    "save_whole",
    "trim_history",
]

STATE_FILE = "state.json"
VARIABLES_FILE = "variables.npz"
# Seconds to pause in the middle of each backup write, so that a test can kill a process there.
PAUSE_VARIABLE = "KT_BACKUP_WRITE_PAUSE_S"
# The number of batches after which the process SIGKILLs itself, so that a test can kill a run
# any number of batches after a backup (the batches since it are then replayed on resume).
KILL_VARIABLE = "KT_KILL_AFTER_BATCH"


class TrainingInterrupted(Exception):
    """Training stopped on SIGTERM after a backup; the same command resumes it."""

    def __init__(self, run_dir, batches: int):
        super().__init__(
            f"stopped by SIGTERM after batch {batches}, backed up in {run_dir}; run the same "
            "command again to resume"
        )
        self.run_dir, self.batches = run_dir, batches


class RunClock:
    """Training wall-clock of a run over its resumes: the time in earlier attempts (restored
    from the backup) plus the time since this attempt started training."""

    def __init__(self, seconds_before: float = 0.0):
        self.seconds_before = float(seconds_before)
        self._start = None

    def start(self) -> None:
        if self._start is None:
            self._start = time.perf_counter()

    def spent(self) -> float:
        now = time.perf_counter()
        return self.seconds_before + (now - (self._start if self._start is not None else now))


def _run_variables(model) -> list:
    """Every piece of state of a compiled, built model, in a fixed order."""
    return [*model.variables, *model.optimizer.variables, *model.metrics_variables]


class RunBackup(keras.callbacks.Callback):
    """Saves the run's state every ``every_batches`` batches (0: at epoch ends only), at each
    epoch end and when the process gets SIGTERM (then it stops training: ``interrupted``).

    Call ``restore_point()`` before ``fit`` to learn where the run resumes; the state itself is
    assigned in ``on_train_begin`` (metrics at the first ``on_epoch_begin``, after Keras resets
    them). Put it last among the callbacks, so that an epoch's history row and checkpoint are
    written before the backup that says the epoch is done.
    """

    def __init__(self, directory, every_batches: int, steps_per_epoch: int, keep: int = 2):
        super().__init__()
        self.directory = pathlib.Path(directory)
        self.every = int(every_batches or 0)
        self.steps_per_epoch = int(steps_per_epoch)
        self.keep = max(int(keep), 1)
        self.batches = 0  # Keras batches (micro-batches under accumulation) consumed by the run
        self.clock = RunClock()
        self.interrupted = False
        self._restored = None  # (state, arrays) read by restore_point, assigned once
        self._metrics_pending = None
        self._sigterm = threading.Event()

    # ----------------------------------------------------------------- resuming
    def restore_point(self, at: int | None = None) -> dict | None:
        """Reads the newest backup that loads (or the one after ``at`` batches):
        ``{"batches", "epoch", "offset", "updates"}``; None for a run with no backup."""
        paths = self.saved() if at is None else [self.directory / f"batch-{at}"]
        for path in reversed(paths):
            try:
                state = json.loads((path / STATE_FILE).read_text())
                with np.load(path / VARIABLES_FILE) as stored:
                    arrays = [stored[f"v{i}"] for i in range(state["count"])]
            except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
                if at is not None:
                    raise ValueError(f"{path}: unreadable backup ({error})") from error
                warnings.warn(
                    f"{path}: unreadable backup ({error}); trying an earlier one", stacklevel=2
                )
                continue
            self._restored = (state, arrays)
            self.batches = state["batches"]
            self.clock = RunClock(state["seconds"])
            return {key: state[key] for key in ("batches", "epoch", "offset", "updates")}
        return None

    def saved_batches(self) -> list[int]:
        return [int(p.name.split("-")[1]) for p in self.saved()]

    def saved(self) -> list[pathlib.Path]:
        """Complete backups, oldest first."""
        if not self.directory.is_dir():
            return []
        paths = [p for p in self.directory.iterdir() if re.fullmatch(r"batch-\d+", p.name)]
        return sorted(paths, key=lambda p: int(p.name.split("-")[1]))

    def on_train_begin(self, logs=None):
        self.clock.start()
        self._listen_for_sigterm()
        if self._restored is None:
            return
        state, arrays = self._restored
        self._restored = None
        variables = _run_variables(self.model)
        shapes = [list(v.shape) for v in variables]
        if shapes != [list(a.shape) for a in arrays]:  # names may differ: Keras numbers layers
            raise ValueError(
                f"{self.directory}: the backup holds other variables than this model "
                f"({len(arrays)} saved, {len(shapes)} now); was the config changed?"
            )
        metric_count = len(self.model.metrics_variables)
        for variable, value in zip(variables[: len(variables) - metric_count], arrays):
            variable.assign(value)
        self._metrics_pending = arrays[len(arrays) - metric_count :] if state["offset"] else None

    def on_epoch_begin(self, epoch, logs=None):
        if self._metrics_pending is not None:  # the epoch under way when the backup was taken
            for variable, value in zip(self.model.metrics_variables, self._metrics_pending):
                variable.assign(value)
            self._metrics_pending = None

    # ----------------------------------------------------------------- saving
    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        if str(self.batches) == os.environ.get(KILL_VARIABLE):  # fault injection (tests) only
            os.kill(os.getpid(), signal.SIGKILL)
        if self.batches % self.steps_per_epoch == 0:
            return  # the epoch's last batch: on_epoch_end saves, after validation and history
        if self._sigterm.is_set():
            self._save()
            self.interrupted = self.model.stop_training = True
            print(f"\nSIGTERM: backed up after batch {self.batches}; stopping.")
        elif self.every and self.batches % self.every == 0:
            self._save()

    def on_epoch_end(self, epoch, logs=None):
        if self.batches % self.steps_per_epoch:
            return  # stopped mid-epoch (SIGTERM, time budget): the batch's backup stands
        self._save()
        if self._sigterm.is_set():
            self.interrupted = self.model.stop_training = True
            print(f"\nSIGTERM: backed up after epoch {epoch + 1}; stopping.")

    def on_train_end(self, logs=None):
        if threading.current_thread() is threading.main_thread() and self._previous_handler:
            signal.signal(signal.SIGTERM, self._previous_handler)
            self._previous_handler = None

    def remove(self) -> None:
        """Deletes the backups (the run has finished)."""
        shutil.rmtree(self.directory, ignore_errors=True)

    def _save(self) -> None:
        variables = _run_variables(self.model)
        epoch, offset = divmod(self.batches, self.steps_per_epoch)
        state = {
            "batches": self.batches,
            "epoch": epoch,
            "offset": offset,
            "updates": int(keras.ops.convert_to_numpy(self.model.optimizer.iterations)),
            "seconds": self.clock.spent(),
            "count": len(variables),
            "paths": [v.path for v in variables],
        }
        arrays = {f"v{i}": keras.ops.convert_to_numpy(v) for i, v in enumerate(variables)}
        with atomic_path(self.directory / f"batch-{self.batches}", fsync=True) as tmp:
            tmp.mkdir()  # the folder is whole, or not there at all
            np.savez(tmp / VARIABLES_FILE, **arrays)
            time.sleep(float(os.environ.get(PAUSE_VARIABLE, 0)))  # fault injection (tests) only
            (tmp / STATE_FILE).write_text(json.dumps(state))
        for old in self.saved()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)

    _previous_handler = None

    def _listen_for_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals reach the main thread only (a notebook's worker thread: no SIGTERM)
        if self._previous_handler is None:
            self._previous_handler = signal.signal(
                signal.SIGTERM, lambda signum, frame: self._sigterm.set()
            )


def save_whole(model, path) -> None:
    """``model.save(path)`` under a temporary name, then renamed: a kill never leaves a
    half-written ``.keras`` file at ``path``."""
    with atomic_path(path) as tmp:
        model.save(tmp)


def fit_segments(batches: int, steps_per_epoch: int, epochs: int) -> list[dict]:
    """The ``fit`` calls that continue a run from ``batches`` consumed batches: a first one that
    finishes the epoch under way (if any), then one for the remaining epochs. Each names the
    batches its input must skip, since every ``fit`` starts its own iterator over the dataset."""
    epoch, offset = divmod(batches, steps_per_epoch)
    segments = []
    if offset:
        rest = steps_per_epoch - offset
        segments.append(dict(initial_epoch=epoch, epochs=epoch + 1, steps=rest, skip=batches))
        epoch += 1
    if epoch < epochs:
        segments.append(
            dict(
                initial_epoch=epoch,
                epochs=epochs,
                steps=steps_per_epoch,
                skip=epoch * steps_per_epoch,
            )
        )
    return segments


def trim_history(path, epochs_done: int) -> None:
    """Keeps the header and the rows of the first ``epochs_done`` epochs of a ``history.csv``
    (rows a killed attempt wrote after its last backup would otherwise come twice)."""
    path = pathlib.Path(path)
    if not path.exists():
        return
    lines = path.read_text().splitlines(keepends=True)
    kept = lines[:1] + [line for line in lines[1:] if int(line.split(",", 1)[0]) < epochs_done]
    atomic_write_text(path, "".join(kept))
