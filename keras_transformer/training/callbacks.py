"""Keras callbacks of a training run: throughput and learning-rate logs, last-N checkpoints (for
averaging, section 6.1), a wall-clock budget over resumes, and validation BLEU."""

from __future__ import annotations

import json
import pathlib
import time

import keras

from keras_transformer.text.files import atomic_path
from keras_transformer.training.backup import RunClock
from keras_transformer.training.run_dir import CHECKPOINT_PATTERN, checkpoint_step, list_checkpoints

__all__ = [
    "BleuCallback",
    "FirstStep",
    "KeepLastCheckpoints",
    "TimeBudget",
    "TokensPerSecond",
    "checkpoint_step",
    "list_checkpoints",
]


class TokensPerSecond(keras.callbacks.Callback):
    """Adds ``tokens_per_second`` (real target tokens, from the ``tokens`` metric) and
    ``learning_rate`` to the logs, so the progress bar, CSV and TensorBoard show them.

    The epoch's figure is the training one: Keras evaluates validation data with the same metric
    objects before ``on_epoch_end``, so the ``tokens`` value seen there counts validation tokens.
    """

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()
        self._tokens, self._elapsed = 0.0, 0.0

    def on_train_batch_end(self, batch, logs=None):
        if logs is None:
            return
        if "tokens" in logs:
            self._tokens = float(logs["tokens"])
            self._elapsed = time.perf_counter() - self._start
            logs["tokens_per_second"] = self._rate()
        logs["learning_rate"] = _current_learning_rate(self.model.optimizer)

    def _rate(self):
        return self._tokens / max(self._elapsed, 1e-9)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            if "tokens" in logs:
                logs["tokens"] = self._tokens
                logs["tokens_per_second"] = self._rate()
            logs["learning_rate"] = _current_learning_rate(self.model.optimizer)


def _current_learning_rate(optimizer) -> float:
    rate = optimizer.learning_rate
    return float(keras.ops.convert_to_numpy(rate))


class FirstStep(keras.callbacks.Callback):
    """Prints, once, how long the process took to its first training step since ``started``
    (a ``time.perf_counter()``): reading the data up to the first batch (a resumed run's
    restart included), building the model and tracing the step. Silent with ``verbose=0``."""

    def __init__(self, started: float, verbose=1):
        super().__init__()
        self.started, self.verbose = started, verbose
        self.seconds = None

    def on_train_batch_end(self, batch, logs=None):
        if self.seconds is None:
            self.seconds = time.perf_counter() - self.started
            step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
            if self.verbose != 0:
                print(
                    f"First step (update {step}) {self.seconds:.1f} s after the start", flush=True
                )


class KeepLastCheckpoints(keras.callbacks.Callback):
    """Saves ``checkpoints/ckpt-<step>.weights.h5`` at each epoch end and keeps the last ``keep``.

    Keras' ``ModelCheckpoint`` cannot prune old files, which checkpoint averaging needs, hence
    this small callback. Files are written under a temporary name and renamed, so a killed run
    never leaves a half-written checkpoint.
    """

    def __init__(self, directory, keep=20):
        super().__init__()
        self.directory = pathlib.Path(directory)
        self.keep = int(keep)

    def on_epoch_end(self, epoch, logs=None):
        self.directory.mkdir(parents=True, exist_ok=True)
        step = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        path = self.directory / CHECKPOINT_PATTERN.format(step=step)
        with atomic_path(path) as tmp:
            self.model.save_weights(tmp)
        for old in list_checkpoints(self.directory)[: -self.keep]:
            old.unlink()


class TimeBudget(keras.callbacks.Callback):
    """Stops training once ``max_minutes`` of training wall-clock are spent, counting earlier
    (killed and resumed) attempts of the same run: ``clock`` is the run's
    :class:`~keras_transformer.training.backup.RunClock` (restored with the backup); without one,
    the seconds recorded in ``state_file`` by an earlier attempt count. ``state_file`` gets the
    time spent at each epoch end (for reports)."""

    def __init__(self, max_minutes, state_file, clock=None):
        super().__init__()
        self.max_seconds = float(max_minutes) * 60.0
        self.state_file = pathlib.Path(state_file)
        self.clock = clock if clock is not None else RunClock(self._spent_before())

    def _spent_before(self) -> float:
        if self.state_file.exists():
            return float(json.loads(self.state_file.read_text()).get("seconds", 0.0))
        return 0.0

    def on_train_begin(self, logs=None):
        self.clock.start()

    def spent(self) -> float:
        return self.clock.spent()

    def on_train_batch_end(self, batch, logs=None):
        if self.spent() >= self.max_seconds:  # stop mid-epoch: the epoch's checkpoint still follows
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        spent = self.spent()
        self.state_file.write_text(json.dumps({"seconds": spent, "epoch": epoch + 1}))
        if logs is not None:
            logs["train_minutes"] = spent / 60.0
        if spent >= self.max_seconds:
            budget = self.max_seconds / 60
            print(f"\nTimeBudget: {spent / 60:.1f} of {budget:.1f} minutes spent; stopping.")
            self.model.stop_training = True


class BleuCallback(keras.callbacks.Callback):
    """Greedy-decodes validation sentences every ``every`` epochs and logs sacreBLEU
    (``val_bleu``); ``search``: other settings of the search (``max_extra_length``, ...)."""

    def __init__(self, tokenizer, sources, references, every=1, batch_size=64, **search):
        super().__init__()
        self.tokenizer = tokenizer
        self.sources = list(sources)
        self.references = list(references)
        self.every = max(int(every), 1)
        self.batch_size = batch_size
        self.search = {**search, "beam_size": 1}

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every:
            if logs is not None:  # a value every epoch: CSVLogger fixes its columns at epoch 1
                logs["val_bleu"] = float("nan")
            return
        from keras_transformer.evaluation import corpus_bleu, translate_sentences

        hypotheses = translate_sentences(
            self.model,
            self.tokenizer,
            self.sources,
            batch_size=self.batch_size,
            **self.search,
        )
        bleu = corpus_bleu(hypotheses, self.references).score
        if logs is not None:
            logs["val_bleu"] = bleu
        print(f"\nval_bleu (greedy, {len(self.sources)} sentences): {bleu:.2f}")
