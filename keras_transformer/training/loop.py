"""Training with ``model.fit``: the paper's optimizer, schedule and loss (section 5) on a resumable
run directory, and loading a run's model back.

``train`` is a sequence of named steps: open the run directory (refusing one started with other
settings), set the process up (seed, dtype policy), get the tokenizer, build the datasets,
build and compile the model under the strategy, assemble the callbacks, fit, and finish.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time

import keras

from keras_transformer.config import ModelSettings
from keras_transformer.machine import machine_record
from keras_transformer.training import shards, workers
from keras_transformer.training.backup import (
    RunBackup,
    TrainingInterrupted,
    fit_segments,
    save_whole,
    trim_history,
)
from keras_transformer.training.callbacks import (
    BleuCallback,
    FirstStep,
    KeepLastCheckpoints,
    TimeBudget,
    TokensPerSecond,
    checkpoint_step,
    list_checkpoints,
)
from keras_transformer.training.init_from import (
    check_same_shape,
    load_init_weights,
    resolve_init_from,
)
from keras_transformer.training.inputs import check_inputs, train_input, validation_input
from keras_transformer.training.run_config import (
    TrainingConfig,
    TrainingSettings,
    data_path,
)
from keras_transformer.training.run_dir import (
    BACKUP_DIR,
    CHECKPOINT_DIR,
    FINISHED_FILE,
    HISTORY_FILE,
    MODEL_FILE,
    RUN_CONFIG,
    TOKENIZER_DIR,
    check_run_dir,
    check_same_run,
)

__all__ = [
    "check_inputs",
    "check_same_run",
    "compile_model",
    "load_run_model",
    "prepare_tokenizer",
    "train",
]


# ---------------------------------------------------------------------------------- building
def compile_model(model, settings: TrainingSettings):
    """Compiles with Adam(0.9, 0.98, 1e-9), the warmup schedule, label smoothing and metrics.

    The schedule's ``d_model`` is the model's own (``model_dims``). Under a ``mixed_float16``
    policy Keras wraps the optimizer in a ``LossScaleOptimizer`` itself
    (``compile(auto_scale_loss=True)``, the default); ``mixed_bfloat16`` needs no scaling.
    ``jit_compile`` is passed explicitly: Keras' "auto" turns XLA off on CPU and under strategies.
    ``xla_loss`` picks the loss's and the metrics' XLA-compiled twins (one compile per batch
    shape) or TF's plain kernels (``losses.py``).
    """
    from keras_transformer.losses import LabelSmoothedCrossEntropy
    from keras_transformer.metrics import MaskedAccuracy, Perplexity, TokenCount
    from keras_transformer.model import model_dims
    from keras_transformer.schedules import transformer_optimizer

    optimizer_kwargs = {}
    if settings.gradient_accumulation_steps > 1:
        optimizer_kwargs["gradient_accumulation_steps"] = settings.gradient_accumulation_steps
    if settings.clipnorm:
        optimizer_kwargs["clipnorm"] = settings.clipnorm
    optimizer = transformer_optimizer(
        model_dims(model)["d_model"],
        warmup_steps=settings.warmup_steps,
        scale=settings.lr_scale,
        **optimizer_kwargs,
    )
    model.compile(
        optimizer=optimizer,
        loss=LabelSmoothedCrossEntropy(
            label_smoothing=settings.label_smoothing, jit_compile=settings.xla_loss
        ),
        metrics=[
            MaskedAccuracy(jit_compile=settings.xla_loss),
            Perplexity(jit_compile=settings.xla_loss),
            TokenCount(),
        ],
        jit_compile=settings.jit_compile,
    )
    return model


def prepare_tokenizer(config: TrainingConfig, run_dir: pathlib.Path):
    """Loads the run's tokenizer, or the one of the model ``training.init_from`` names, or the
    prepared shards' one, or the configured one, or trains one on the training split; with
    ``data.shards`` any other tokenizer than the shards' is refused."""
    from keras_transformer.text.tokenizer import SubwordTokenizer

    saved = pathlib.Path(run_dir) / TOKENIZER_DIR
    data = config.data
    named = data_path(data.tokenizer) if data.tokenizer else None
    if config.training.init_from and not named:  # fine-tuning keeps the model's vocabulary,
        named = resolve_init_from(config.training.init_from).tokenizer_dir  # unless told
    if saved.exists():
        tokenizer, named = SubwordTokenizer.load(saved), None
    elif data.shards:
        tokenizer = SubwordTokenizer.load(named or shards.tokenizer_folder(data.shards))
    elif named:
        tokenizer = SubwordTokenizer.load(named)
    else:
        if data.tfds:
            raise ValueError(
                "data.tokenizer: with a TFDS source, prepare a tokenizer first "
                "(keras-transformer prepare) and point data.tokenizer at it"
            )
        files = [data_path(data.train_source), data_path(data.train_target)]
        tokenizer = SubwordTokenizer.train(
            files,
            vocab_size=data.vocab_size,
            max_sentences=data.tokenizer_max_sentences,
            output_dir=pathlib.Path(run_dir) / "tokenizer-build",
        )
    if data.shards:
        manifest = shards.read_prepared(data.shards)
        shards.check_tokenizer(data.shards, manifest, tokenizer, named and str(named))
    if not saved.exists():
        tokenizer.save(saved)
    return SubwordTokenizer.load(saved)


# ---------------------------------------------------------------------------------- train
def train(config: TrainingConfig, run_dir, verbose="auto", callbacks=()) -> keras.Model:
    """Trains (or resumes) a run in ``run_dir`` with ``model.fit``; returns the trained model.

    The run directory ends up holding ``config.yaml``, ``tokenizer/``, ``checkpoints/`` (last N),
    ``backup/`` (removed at the end), ``logs/`` (TensorBoard) and ``model.keras``. Killing the
    process (``kill -9`` too) and calling ``train`` again with the same ``run_dir`` resumes from
    the last backup (every ``training.backup_every_steps`` batches, each epoch end, and on SIGTERM,
    which then stops with :class:`TrainingInterrupted`) at the same batch of the input stream with
    the same weights, optimizer, dropout seeds, metrics and time spent (``training/backup.py``);
    other data or model settings than the run's own raise ``ValueError`` (``check_same_run``).
    ``callbacks`` are added to the run's own ones. With ``training.mixed_precision`` set, the
    global dtype policy is set to it (as in Keras' mixed-precision guide) and stays set: models
    built afterwards in the same process use it too unless you set it back.

    Example:

    A two-step smoke run of the quickstart config (drop the overrides for its 5-minute run):

    >>> config = TrainingConfig.load("configs/quickstart.yaml", [
    ...     "training.max_steps=2", "training.steps_per_epoch=2", "data.vocab_size=1000"])
    >>> model = train(config, "runs/quick", verbose=0)
    >>> sorted(path.name for path in pathlib.Path("runs/quick").glob("*.*"))
    ['config.yaml', 'finished.json', 'history.csv', 'model.keras', 'time_spent.json']
    >>> model = train(config, "runs/quick", verbose=0)  # finished: loads model.keras
    runs/quick has finished training ...
    """
    from keras_transformer.distribute import get_strategy

    started = time.perf_counter()
    settings = config.training
    check_inputs(config)
    workers.check_multi_worker_config(config)
    strategy = get_strategy(settings.strategy)  # first: collectives are set up at start-up
    run_dir = _open_run_dir(config, workers.worker_run_dir(run_dir, strategy))
    if (run_dir / FINISHED_FILE).exists():
        print(
            f"{run_dir} has finished training ({FINISHED_FILE}); loading {MODEL_FILE}. "
            "Use a new run directory to train again."
        )
        return keras.models.load_model(run_dir / MODEL_FILE)
    _set_up_process(settings)
    tokenizer = prepare_tokenizer(config, run_dir)
    model_config = config.model_config(tokenizer.vocab_size)
    _save_run_config(config, model_config, run_dir)
    model = _build_compiled_model(model_config, settings, strategy)
    backup = RunBackup(run_dir / BACKUP_DIR, settings.backup_every_steps, settings.steps_per_epoch)
    resume = workers.agree_on_backup(backup, strategy)
    if resume:
        print(f"Resuming {run_dir} after batch {resume['batches']} (epoch {resume['epoch'] + 1})")
        _rewind(run_dir, resume)
    elif settings.init_from:
        _start_from(model, config, model_config, run_dir)
    callbacks = [
        *callbacks,
        FirstStep(started, verbose),
        *_run_callbacks(config, run_dir, tokenizer, backup),
    ]
    _fit(model, config, tokenizer, callbacks, backup.batches, verbose)
    if backup.interrupted:
        raise TrainingInterrupted(run_dir, backup.batches)
    _finish(model, run_dir)
    backup.remove()
    return model


def _fit(model, config: TrainingConfig, tokenizer, callbacks, batches_done: int, verbose) -> None:
    """``model.fit`` from ``batches_done`` batches on: the rest of the epoch under way, then the
    remaining epochs, each ``fit`` on a new input pipeline with the batches trained on skipped."""
    settings = config.training
    validation_ds = validation_input(config.data, tokenizer)
    epochs = max(1, -(-settings.max_steps // settings.steps_per_epoch))
    for segment in fit_segments(batches_done, settings.steps_per_epoch, epochs):
        model.fit(
            train_input(config.data, tokenizer, skip=segment["skip"]),
            initial_epoch=segment["initial_epoch"],
            epochs=segment["epochs"],
            steps_per_epoch=segment["steps"],
            validation_data=validation_ds,
            callbacks=callbacks,
            verbose=verbose,
            shuffle=False,  # make_dataset shuffles; Keras ignores (and warns about) it for tf.data
        )
        if model.stop_training:  # the time budget, a NaN loss or SIGTERM
            return


def _rewind(run_dir: pathlib.Path, resume: dict) -> None:
    """Forgets what a killed attempt wrote after its last backup: later history rows, and the
    checkpoints of steps the resumed run will take again."""
    trim_history(run_dir / HISTORY_FILE, resume["epoch"])
    for path in list_checkpoints(run_dir / CHECKPOINT_DIR):
        step = checkpoint_step(path)
        if step > resume["updates"] or (step == resume["updates"] and resume["offset"]):
            path.unlink()


def _open_run_dir(config: TrainingConfig, run_dir) -> pathlib.Path:
    run_dir = pathlib.Path(run_dir)
    check_same_run(config, run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def _set_up_process(settings: TrainingSettings) -> None:
    """Seeds Python, NumPy and TensorFlow, and sets the global dtype policy if one is asked."""
    keras.utils.set_random_seed(settings.seed)
    if settings.deterministic:
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()
    if settings.mixed_precision:
        keras.mixed_precision.set_global_policy(settings.mixed_precision)


def _start_from(model, config: TrainingConfig, model_config, run_dir: pathlib.Path) -> None:
    """Fine-tuning: the weights of ``training.init_from``; config.yaml records the file."""
    source = resolve_init_from(config.training.init_from)
    data = config.data
    tokenizer = data_path(data.tokenizer) if data.tokenizer else None
    check_same_shape(source, model_config, vocabulary_may_change=tokenizer is not None)
    vocabulary = load_init_weights(model, source, tokenizer)
    print(f"Starting {run_dir} from the weights of {source.weights}, {vocabulary}")
    training = dataclasses.replace(config.training, init_from=str(source.weights))
    _save_run_config(dataclasses.replace(config, training=training), model_config, run_dir)


def _save_run_config(config: TrainingConfig, model_config, run_dir: pathlib.Path) -> None:
    """Writes the run's config.yaml with every model field filled in (vocabulary sizes too)."""
    resolved = dataclasses.replace(config, model=ModelSettings.from_config(model_config))
    resolved.save(run_dir / RUN_CONFIG)


def _build_compiled_model(model_config, settings: TrainingSettings, strategy) -> keras.Model:
    from keras_transformer.model import build_transformer

    with strategy.scope():
        return compile_model(build_transformer(model_config), settings)


def _run_callbacks(config: TrainingConfig, run_dir: pathlib.Path, tokenizer, backup) -> list:
    """The run's own callbacks: throughput, NaN stop, checkpoints, the time budget, validation
    BLEU, TensorBoard, the CSV history and, last (after the epoch's row and checkpoint), the
    backup to resume from."""
    settings = config.training
    callbacks = [
        TokensPerSecond(),
        keras.callbacks.TerminateOnNaN(),
        KeepLastCheckpoints(run_dir / CHECKPOINT_DIR, keep=settings.keep_checkpoints),
    ]
    budget = settings.max_minutes or float("inf")  # without one it still logs train_minutes
    callbacks.append(TimeBudget(budget, run_dir / "time_spent.json", clock=backup.clock))
    if settings.bleu_every_epochs and config.data.validation_source and not config.data.tfds:
        from keras_transformer.text.lines import read_lines

        sources = read_lines(data_path(config.data.validation_source), settings.bleu_sentences)
        references = read_lines(data_path(config.data.validation_target), settings.bleu_sentences)
        callbacks.append(
            BleuCallback(tokenizer, sources, references, every=settings.bleu_every_epochs)
        )
    callbacks.append(keras.callbacks.TensorBoard(str(run_dir / "logs"), update_freq=50))
    callbacks.append(keras.callbacks.CSVLogger(str(run_dir / HISTORY_FILE), append=True))
    callbacks.append(backup)
    return callbacks


def _finish(model: keras.Model, run_dir: pathlib.Path) -> None:
    """Saves ``model.keras``, then ``finished.json`` (so a rerun reloads instead of training):
    the updates made and where and when the training finished (``machine_record``)."""
    save_whole(model, run_dir / MODEL_FILE)
    steps = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    finished = {"steps": steps, "trained": machine_record()}
    (run_dir / FINISHED_FILE).write_text(json.dumps(finished) + "\n")


# ---------------------------------------------------------------------------------- loading
def load_run_model(run_dir, weights: str | pathlib.Path | None = None) -> keras.Model:
    """Rebuilds a run's model from its ``config.yaml`` and loads ``weights`` (default: the final
    ``model.keras`` if present, else the last checkpoint).

    Raises ``NotARunDirectoryError`` (a ``FileNotFoundError``) if ``run_dir`` is not a run.
    """
    from keras_transformer.model import build_transformer

    run_dir = check_run_dir(run_dir)
    if weights is None and (run_dir / MODEL_FILE).exists():
        return keras.models.load_model(run_dir / MODEL_FILE, compile=False)
    config = TrainingConfig.load(run_dir / RUN_CONFIG)
    model = build_transformer(config.model_config())
    if weights is None:
        checkpoints = list_checkpoints(run_dir / CHECKPOINT_DIR)
        if not checkpoints:
            raise FileNotFoundError(f"{run_dir}: neither {MODEL_FILE} nor checkpoints found")
        weights = checkpoints[-1]
    model.load_weights(weights)
    return model
