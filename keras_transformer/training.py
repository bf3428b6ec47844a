"""Training with `model.fit`: the paper's optimizer, schedule and loss (section 5), resumable runs,
checkpoints, TensorBoard, validation BLEU, and checkpoint averaging (section 6.1)."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import pathlib
import re
import time
from typing import Any, Optional

import keras
import numpy as np

from keras_transformer.config import TransformerConfig, load_mapping

RUN_CONFIG = "config.yaml"  # the whole TrainingConfig, vocabulary sizes filled in
MODEL_FILE = "model.keras"  # final weights with the architecture (compiled)
TOKENIZER_DIR = "tokenizer"
CHECKPOINT_DIR = "checkpoints"
FINISHED_FILE = "finished.json"  # written last: a rerun of a finished run does not train again
CHECKPOINT_PATTERN = "ckpt-{step:08d}.weights.h5"


@dataclasses.dataclass
class DataSettings:
    """Where the parallel text comes from and how it is batched.

    Paths are relative to ``KT_DATA_DIR`` (default ``../shared/data``) unless absolute.
    ``tfds`` (e.g. ``wmt14_translate/de-en``) replaces the files when set; the download then
    happens only if ``tfds_download`` is true.
    """

    train_source: Optional[str] = "multi30k/train.en"
    train_target: Optional[str] = "multi30k/train.de"
    validation_source: Optional[str] = "multi30k/val.en"
    validation_target: Optional[str] = "multi30k/val.de"
    tfds: Optional[str] = None
    tfds_source_lang: str = "en"
    tfds_target_lang: str = "de"
    tfds_download: bool = False
    shards: Optional[str] = None  # a prepared TFRecord folder (pipelines.prepare) instead of text
    tokenizer: Optional[str] = None  # reuse a saved tokenizer instead of training one
    vocab_size: int = 8000
    tokens_per_batch: int = 4096
    max_length: int = 100
    shuffle_seed: int = 0


@dataclasses.dataclass
class TrainingSettings:
    """Optimisation and run control (section 5)."""

    max_steps: int = 20000
    max_minutes: Optional[float] = None  # wall-clock budget over all resumes of the run
    steps_per_epoch: int = 500  # one Keras "epoch" = one checkpoint / validation interval
    warmup_steps: int = 4000
    lr_scale: float = 1.0
    label_smoothing: float = 0.1
    gradient_accumulation_steps: int = 1
    clipnorm: Optional[float] = None
    mixed_precision: Optional[str] = None  # None, "mixed_bfloat16" (CPU) or "mixed_float16" (GPU)
    jit_compile: bool = False
    strategy: str = "auto"  # "auto", "mirrored", "multi_worker", "default"
    keep_checkpoints: int = 20
    bleu_every_epochs: int = 0  # 0 = no BLEU during training
    bleu_sentences: int = 300
    seed: int = 0


@dataclasses.dataclass
class TrainingConfig:
    """A whole run: ``model`` (TransformerConfig fields, or ``preset`` plus overrides), ``data`` and
    ``training``. Vocabulary sizes come from the tokenizer and need not be given.

    Example YAML::

        model: {preset: small, dropout: 0.1}
        data: {train_source: multi30k/train.en, train_target: multi30k/train.de, vocab_size: 8000}
        training: {max_steps: 20000, warmup_steps: 4000}
    """

    model: dict = dataclasses.field(default_factory=lambda: {"preset": "small"})
    data: DataSettings = dataclasses.field(default_factory=DataSettings)
    training: TrainingSettings = dataclasses.field(default_factory=TrainingSettings)

    @classmethod
    def from_dict(cls, values: dict, source: str = "config") -> "TrainingConfig":
        unknown = sorted(set(values) - {"model", "data", "training"})
        if unknown:
            raise ValueError(f"{source}: unknown section(s) {unknown}; expected model, data, training")

        def section(klass, name):
            given = values.get(name) or {}
            known = {f.name for f in dataclasses.fields(klass)}
            bad = sorted(set(given) - known)
            if bad:
                raise ValueError(f"{source}: unknown field(s) {bad} in '{name}'; known: {sorted(known)}")
            return klass(**given)

        return cls(model=dict(values.get("model") or {"preset": "small"}),
                   data=section(DataSettings, "data"), training=section(TrainingSettings, "training"))

    @classmethod
    def load(cls, path, overrides=()) -> "TrainingConfig":
        """Reads YAML/JSON and applies ``section.field=value`` overrides (values parsed as YAML)."""
        values = load_mapping(path)
        apply_overrides(values, overrides)
        return cls.from_dict(values, source=str(path))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def save(self, path) -> None:
        import yaml

        pathlib.Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    def model_config(self, vocab_size: int) -> TransformerConfig:
        """The TransformerConfig of this run for a shared vocabulary of ``vocab_size``."""
        values = dict(self.model)
        preset = values.pop("preset", None)
        values.setdefault("source_vocab_size", vocab_size)
        if preset:
            return TransformerConfig.preset(preset, values.pop("source_vocab_size"), **values)
        return TransformerConfig.from_dict(values)


def apply_overrides(values: dict, overrides) -> dict:
    """Applies ``["training.max_steps=100", "model.dropout=0.3"]`` to a nested dict in place."""
    import yaml

    for override in overrides or ():
        key, sep, raw = override.partition("=")
        if not sep or "." not in key:
            raise ValueError(f"Override {override!r} must look like section.field=value")
        section, field = key.split(".", 1)
        values.setdefault(section, {})
        if values[section] is None:
            values[section] = {}
        values[section][field] = yaml.safe_load(raw)
    return values


def data_path(path: Optional[str]) -> Optional[pathlib.Path]:
    """Resolves a corpus path against ``KT_DATA_DIR`` (default ``../shared/data``)."""
    if path is None:
        return None
    path = pathlib.Path(os.path.expanduser(path))
    if path.is_absolute() or path.exists():
        return path
    root = pathlib.Path(os.environ.get("KT_DATA_DIR", pathlib.Path.cwd().parent / "shared" / "data"))
    return root / path


# ---------------------------------------------------------------------------------- callbacks
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
        tmp = path.with_name(path.name.replace(".weights.h5", ".tmp.weights.h5"))
        self.model.save_weights(tmp)
        os.replace(tmp, path)
        for old in list_checkpoints(self.directory)[:-self.keep]:
            old.unlink()


def list_checkpoints(directory) -> list[pathlib.Path]:
    """Complete checkpoints in step order."""
    paths = [pathlib.Path(p) for p in glob.glob(str(pathlib.Path(directory) / "ckpt-*.weights.h5"))]
    paths = [p for p in paths if re.fullmatch(r"ckpt-\d+\.weights\.h5", p.name)]
    return sorted(paths, key=lambda p: int(p.name.split("-")[1].split(".")[0]))


class TimeBudget(keras.callbacks.Callback):
    """Stops training once ``max_minutes`` of training wall-clock are spent, counting earlier
    (killed and resumed) attempts of the same run through a small state file."""

    def __init__(self, max_minutes, state_file):
        super().__init__()
        self.max_seconds = float(max_minutes) * 60.0
        self.state_file = pathlib.Path(state_file)

    def _spent_before(self) -> float:
        if self.state_file.exists():
            return float(json.loads(self.state_file.read_text()).get("seconds", 0.0))
        return 0.0

    def on_train_begin(self, logs=None):
        self._before = self._spent_before()
        self._start = time.perf_counter()

    def spent(self) -> float:
        return self._before + time.perf_counter() - self._start

    def on_train_batch_end(self, batch, logs=None):
        if self.spent() >= self.max_seconds:  # stop mid-epoch: the epoch's checkpoint still follows
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        spent = self.spent()
        self.state_file.write_text(json.dumps({"seconds": spent, "epoch": epoch + 1}))
        if logs is not None:
            logs["train_minutes"] = spent / 60.0
        if spent >= self.max_seconds:
            print(f"\nTimeBudget: {spent / 60:.1f} of {self.max_seconds / 60:.1f} minutes spent; stopping.")
            self.model.stop_training = True


class BleuCallback(keras.callbacks.Callback):
    """Greedy-decodes validation sentences every ``every`` epochs and logs sacreBLEU (``val_bleu``)."""

    def __init__(self, tokenizer, sources, references, every=1, batch_size=64, max_extra_length=50):
        super().__init__()
        self.tokenizer = tokenizer
        self.sources = list(sources)
        self.references = list(references)
        self.every = max(int(every), 1)
        self.batch_size = batch_size
        self.max_extra_length = max_extra_length

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every:
            if logs is not None:  # a value every epoch: CSVLogger fixes its columns at epoch 1
                logs["val_bleu"] = float("nan")
            return
        from keras_transformer.evaluation import corpus_bleu, translate_sentences

        hypotheses = translate_sentences(self.model, self.tokenizer, self.sources, beam_size=1,
                                         batch_size=self.batch_size,
                                         max_extra_length=self.max_extra_length)
        bleu = corpus_bleu(hypotheses, self.references).score
        if logs is not None:
            logs["val_bleu"] = bleu
        print(f"\nval_bleu (greedy, {len(self.sources)} sentences): {bleu:.2f}")


# ---------------------------------------------------------------------------------- building
def compile_model(model, d_model: int, settings: TrainingSettings):
    """Compiles with Adam(0.9, 0.98, 1e-9), the warmup schedule, label smoothing and metrics.

    Under a ``mixed_float16`` policy Keras wraps the optimizer in a ``LossScaleOptimizer``
    itself (``compile(auto_scale_loss=True)``, the default); ``mixed_bfloat16`` needs no scaling.
    ``jit_compile`` is passed explicitly: Keras' "auto" turns XLA off on CPU and under strategies.
    """
    from keras_transformer.losses import LabelSmoothedCrossEntropy, MaskedAccuracy, Perplexity, TokenCount
    from keras_transformer.schedules import transformer_optimizer

    optimizer_kwargs = {}
    if settings.gradient_accumulation_steps > 1:
        optimizer_kwargs["gradient_accumulation_steps"] = settings.gradient_accumulation_steps
    if settings.clipnorm:
        optimizer_kwargs["clipnorm"] = settings.clipnorm
    optimizer = transformer_optimizer(d_model, warmup_steps=settings.warmup_steps,
                                      scale=settings.lr_scale, **optimizer_kwargs)
    model.compile(optimizer=optimizer,
                  loss=LabelSmoothedCrossEntropy(label_smoothing=settings.label_smoothing),
                  metrics=[MaskedAccuracy(), Perplexity(), TokenCount()],
                  jit_compile=settings.jit_compile)
    return model


def _load_pairs(data: DataSettings, split: str):
    from keras_transformer import data as kt_data

    if data.tfds:
        tfds_split = {"train": "train", "validation": "validation"}[split]
        return kt_data.load_tfds(data.tfds, tfds_split, data.tfds_source_lang, data.tfds_target_lang,
                                 download=data.tfds_download)
    source = data.train_source if split == "train" else data.validation_source
    target = data.train_target if split == "train" else data.validation_target
    if source is None or target is None:
        return None
    return kt_data.read_parallel_text(data_path(source), data_path(target))


def prepare_tokenizer(config: TrainingConfig, run_dir: pathlib.Path):
    """Loads the run's tokenizer, or the configured one, or trains one on the training split."""
    from keras_transformer.tokenization import SubwordTokenizer

    saved = run_dir / TOKENIZER_DIR
    if saved.exists():
        return SubwordTokenizer.load(saved)
    if config.data.tokenizer:
        tokenizer = SubwordTokenizer.load(data_path(config.data.tokenizer))
    else:
        if config.data.tfds:
            raise ValueError("data.tokenizer: with a TFDS source, prepare a tokenizer first "
                             "(python -m pipelines.prepare) and point data.tokenizer at it")
        files = [data_path(config.data.train_source), data_path(config.data.train_target)]
        tokenizer = SubwordTokenizer.train(files, vocab_size=config.data.vocab_size,
                                           output_dir=run_dir / "tokenizer-build")
    tokenizer.save(saved)
    return SubwordTokenizer.load(saved)


def check_same_run(config: TrainingConfig, run_dir) -> None:
    """Raises ``ValueError`` if ``run_dir`` holds a run started with other data or model settings.

    Calling ``train`` again on a run directory resumes it, or reloads it once finished; with a
    different corpus, vocabulary or architecture that would silently give the old run's model.
    Training settings (``max_steps``, ``max_minutes``, ``keep_checkpoints``, ...) may change
    between calls.
    """
    path = pathlib.Path(run_dir) / RUN_CONFIG
    if not path.exists():
        return
    saved = TrainingConfig.load(path)
    diffs = [f"data.{key}: {value!r} in the run, {getattr(config.data, key)!r} now"
             for key, value in dataclasses.asdict(saved.data).items()
             if getattr(config.data, key) != value]
    vocab = saved.model.get("source_vocab_size")
    if vocab is not None and not diffs:  # the run's model dict has the vocabulary filled in
        wanted = config.model_config(int(vocab)).to_dict()
        diffs += [f"model.{key}: {saved.model[key]!r} in the run, {value!r} now"
                  for key, value in wanted.items() if key in saved.model and saved.model[key] != value]
    if diffs:
        raise ValueError(f"{run_dir} was started with other settings ({'; '.join(diffs)}): use a "
                         f"new run directory, or the run's own {path} to resume it")


def train(config: TrainingConfig, run_dir, verbose="auto", callbacks=()) -> keras.Model:
    """Trains (or resumes) a run in ``run_dir`` with ``model.fit``; returns the trained model.

    The run directory ends up holding ``config.yaml``, ``tokenizer/``, ``checkpoints/`` (last N),
    ``backup/`` (``BackupAndRestore`` state, removed at the end), ``logs/`` (TensorBoard) and
    ``model.keras``. Killing the process and calling ``train`` again with the same ``run_dir``
    resumes at the last finished epoch (``steps_per_epoch`` steps) with the same optimizer state;
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
    from keras_transformer import data as kt_data
    from keras_transformer.distribute import get_strategy
    from keras_transformer.model import build_transformer

    run_dir = pathlib.Path(run_dir)
    check_same_run(config, run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if (run_dir / FINISHED_FILE).exists():
        print(f"{run_dir} has finished training ({FINISHED_FILE}); loading {MODEL_FILE}. "
              "Use a new run directory to train again.")
        return keras.models.load_model(run_dir / MODEL_FILE)
    settings = config.training
    keras.utils.set_random_seed(settings.seed)
    if settings.mixed_precision:
        keras.mixed_precision.set_global_policy(settings.mixed_precision)

    tokenizer = prepare_tokenizer(config, run_dir)
    model_config = config.model_config(tokenizer.vocab_size)
    config.model = {k: v for k, v in model_config.to_dict().items()}
    config.save(run_dir / RUN_CONFIG)

    train_pairs = _load_pairs(config.data, "train")
    batch_args = dict(tokens_per_batch=config.data.tokens_per_batch, max_length=config.data.max_length)
    train_ds = kt_data.make_dataset(train_pairs, tokenizer, shuffle=True, seed=config.data.shuffle_seed,
                                    repeat=True, **batch_args)
    validation_pairs = _load_pairs(config.data, "validation")
    validation_ds = (None if validation_pairs is None else
                     kt_data.make_dataset(validation_pairs, tokenizer, shuffle=False, **batch_args))

    strategy = get_strategy(settings.strategy)
    with strategy.scope():
        model = build_transformer(model_config)
        compile_model(model, model_config.d_model, settings)

    callbacks = [
        *callbacks,
        TokensPerSecond(),
        keras.callbacks.TerminateOnNaN(),
        keras.callbacks.BackupAndRestore(str(run_dir / "backup"), save_freq="epoch",
                                         delete_checkpoint=True),
        KeepLastCheckpoints(run_dir / CHECKPOINT_DIR, keep=settings.keep_checkpoints),
    ]
    if settings.max_minutes:
        callbacks.append(TimeBudget(settings.max_minutes, run_dir / "time_spent.json"))
    if settings.bleu_every_epochs and config.data.validation_source and not config.data.tfds:
        from keras_transformer.evaluation import read_lines

        sources = read_lines(data_path(config.data.validation_source), settings.bleu_sentences)
        references = read_lines(data_path(config.data.validation_target), settings.bleu_sentences)
        callbacks.append(BleuCallback(tokenizer, sources, references, every=settings.bleu_every_epochs))
    callbacks.append(keras.callbacks.TensorBoard(str(run_dir / "logs"), update_freq=50))
    callbacks.append(keras.callbacks.CSVLogger(str(run_dir / "history.csv"), append=True))

    epochs = max(1, -(-settings.max_steps // settings.steps_per_epoch))
    model.fit(train_ds, epochs=epochs, steps_per_epoch=settings.steps_per_epoch,
              validation_data=validation_ds, callbacks=callbacks, verbose=verbose)
    model.save(run_dir / MODEL_FILE)
    (run_dir / FINISHED_FILE).write_text(json.dumps(
        {"steps": int(keras.ops.convert_to_numpy(model.optimizer.iterations))}) + "\n")
    return model


# ---------------------------------------------------------------------------------- averaging
def load_run_model(run_dir, weights=None) -> keras.Model:
    """Rebuilds a run's model from its ``config.yaml`` and loads ``weights`` (default: the final
    ``model.keras`` if present, else the last checkpoint)."""
    from keras_transformer.model import build_transformer

    run_dir = pathlib.Path(run_dir)
    if weights is None and (run_dir / MODEL_FILE).exists():
        return keras.models.load_model(run_dir / MODEL_FILE, compile=False)
    config = TrainingConfig.load(run_dir / RUN_CONFIG)
    model = build_transformer(TransformerConfig.from_dict(config.model))
    if weights is None:
        checkpoints = list_checkpoints(run_dir / CHECKPOINT_DIR)
        if not checkpoints:
            raise FileNotFoundError(f"{run_dir}: neither {MODEL_FILE} nor checkpoints found")
        weights = checkpoints[-1]
    model.load_weights(weights)
    return model


def average_checkpoints(run_dir, last: int = 5, output=None) -> keras.Model:
    """Averages the weights of the last ``last`` checkpoints into a new model (section 6.1:
    the paper averages the last 5 checkpoints for base models, 20 for big ones).

    Writes ``averaged.keras`` in the run directory unless ``output`` says otherwise.
    """
    run_dir = pathlib.Path(run_dir)
    checkpoints = list_checkpoints(run_dir / CHECKPOINT_DIR)
    if not checkpoints:
        raise FileNotFoundError(f"{run_dir / CHECKPOINT_DIR}: no checkpoints to average")
    if last < 1:
        raise ValueError(f"--last must be >= 1, got {last}")
    chosen = checkpoints[-last:]
    model = load_run_model(run_dir, weights=chosen[0])
    total = [np.asarray(w, dtype=np.float64) for w in model.get_weights()]
    for path in chosen[1:]:
        model.load_weights(path)
        total = [t + w for t, w in zip(total, model.get_weights())]
    model.set_weights([(t / len(chosen)).astype(w.dtype) for t, w in zip(total, model.get_weights())])
    output = pathlib.Path(output) if output else run_dir / "averaged.keras"
    model.save(output)
    print(f"Averaged {len(chosen)} checkpoints ({chosen[0].name} .. {chosen[-1].name}) -> {output}")
    return model
