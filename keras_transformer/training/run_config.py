"""The configuration of a training run: ``model`` (a preset and its changes), ``data``,
``training``, ``search`` and ``export`` sections, read from YAML/JSON with ``section.field=value``
overrides."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re

from keras_transformer.config import ModelSettings, TransformerConfig, load_mapping, rename_old_keys
from keras_transformer.inference.settings import SearchSettings, ServingSettings

# Old key -> new key of the data section (run directories written before the rename still load).
OLD_DATA_KEYS = {"max_length": "max_sentence_length"}


@dataclasses.dataclass
class DataSettings:
    """Where the parallel text comes from and how it is batched.

    Paths are relative to :func:`data_dir` (``KT_DATA_DIR``, default ``../shared/data`` from the
    checkout) unless absolute.
    ``tfds`` (e.g. ``wmt14_translate/de-en``) replaces the files when set; the download then
    happens only if ``tfds_download`` is true. ``max_sentence_length`` drops training pairs with
    a side longer than that many subwords (EOS included); the model's positional table size is
    ``model.max_positions``.
    """

    train_source: str | None = "multi30k/train.en"
    train_target: str | None = "multi30k/train.de"
    validation_source: str | None = "multi30k/val.en"
    validation_target: str | None = "multi30k/val.de"
    tfds: str | None = None
    tfds_source_lang: str = "en"
    tfds_target_lang: str = "de"
    tfds_download: bool = False
    shards: str | None = None  # a prepared TFRecord folder (pipelines.prepare) instead of text
    # Training batches from the tf.data service: a dispatcher address, grpc://HOST:PORT
    # (keras-transformer data-service); workers of one job_name share one stream.
    service: str | None = None
    service_job: str | None = None
    tokenizer: str | None = None  # reuse a saved tokenizer instead of training one
    vocab_size: int = 8000
    # SentencePiece trains on a seeded sample of at most this many sentences (both sides).
    tokenizer_max_sentences: int = 2_000_000
    tokens_per_batch: int = 4096
    max_sentence_length: int = 100
    shuffle_seed: int = 0
    # More training corpora mixed in (back-translation), each {source, target, weight, tag}:
    # its pairs are drawn `weight` times as often as the main corpus's, per pair (1: as many as
    # it has); `tag`, a word put before each of its sources (tagged back-translation).
    mix: list | None = None

    def __post_init__(self):
        for i, corpus in enumerate(self.mix or ()):
            name = f"data.mix[{i}]"
            if not isinstance(corpus, dict) or not {"source", "target"} <= set(corpus):
                raise ValueError(f"{name}={corpus!r}: expected {{source, target, weight, tag}}")
            unknown = sorted(set(corpus) - set(MIX_KEYS))
            if unknown:
                raise ValueError(f"{name}: unknown key(s) {unknown}; known: {list(MIX_KEYS)}")
            weight = corpus.get("weight", 1.0)
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
                raise ValueError(f"{name}.weight={weight!r}: must be a number > 0")
            if corpus.get("tag") is not None and not str(corpus["tag"]).strip():
                raise ValueError(f"{name}.tag={corpus['tag']!r}: a tag must be a word")


MIX_KEYS = ("source", "target", "weight", "tag")


@dataclasses.dataclass
class TrainingSettings:
    """Optimisation and run control (section 5)."""

    max_steps: int = 20000
    max_minutes: float | None = None  # wall-clock budget over all resumes of the run
    steps_per_epoch: int = 500  # one Keras "epoch" = one checkpoint / validation interval
    # A backup to resume from exactly after a kill every this many batches (and at each epoch end
    # and on SIGTERM); 0: at epoch ends only. 100 batches are under a minute on a 2-core CPU.
    backup_every_steps: int = 100
    warmup_steps: int = 4000
    lr_scale: float = 1.0
    label_smoothing: float = 0.1
    gradient_accumulation_steps: int = 1
    clipnorm: float | None = None
    mixed_precision: str | None = None  # None, "mixed_bfloat16" (CPU) or "mixed_float16" (GPU)
    jit_compile: bool = False
    # The loss and the metrics over the [B, T, V] logits as XLA-compiled functions (losses.py):
    # faster steps once each batch shape is compiled; false: TF's kernels, no compile per shape.
    xla_loss: bool = True
    strategy: str = "auto"  # "auto", "mirrored", "multi_worker", "default"
    keep_checkpoints: int = 20
    bleu_every_epochs: int = 0  # 0 = no BLEU during training
    bleu_sentences: int = 300
    seed: int = 0
    # tf.config.experimental.enable_op_determinism(): the same run twice gives the same weights
    deterministic: bool = False
    # Fine-tuning: start from this run directory or weights file's weights and tokenizer, with
    # this run's own schedule (training/init_from.py); config.yaml records the weights file.
    init_from: str | None = None


# How the run's model translates once exported (``export --run`` takes these unless its flags say
# otherwise): inference/settings.py writes each field once, with its default and check.
ExportSettings = ServingSettings  # the export section's class under its old name

# Fields of the search that the export section held before they moved to the search section
# (run directories written before still load).
OLD_EXPORT_KEYS = (
    "max_extra_length",
    "max_output_length",
    "jit_compile",
    "xla_max_batch",
    "drop_finished",
    "share_cross_cache",
)


SECTIONS = ("model", "data", "training", "search", "export")


@dataclasses.dataclass
class TrainingConfig:
    """A whole run: ``model`` (:class:`~keras_transformer.config.ModelSettings`: a preset plus
    TransformerConfig fields), ``data`` and ``training``. Vocabulary sizes come from the
    tokenizer and need not be given. A plain dict for ``model`` is read with
    ``ModelSettings.from_dict``.

    Example YAML::

        model: {preset: small, dropout: 0.1}
        data: {train_source: multi30k/train.en, train_target: multi30k/train.de, vocab_size: 8000}
        training: {max_steps: 20000, warmup_steps: 4000}
    """

    model: ModelSettings = dataclasses.field(default_factory=lambda: ModelSettings(preset="small"))
    data: DataSettings = dataclasses.field(default_factory=DataSettings)
    training: TrainingSettings = dataclasses.field(default_factory=TrainingSettings)
    search: SearchSettings = dataclasses.field(default_factory=SearchSettings)
    export: ServingSettings = dataclasses.field(default_factory=ServingSettings)

    def __post_init__(self):
        if isinstance(self.model, dict):
            self.model = ModelSettings.from_dict(self.model)

    @classmethod
    def from_dict(cls, values: dict, source: str = "config") -> TrainingConfig:
        """Builds a config from nested dicts; unknown sections or fields fail naming ``source``.

        Old key names (``model.max_length``, ``data.max_length``) are read under their new ones.
        """
        unknown = sorted(set(values) - set(SECTIONS))
        if unknown:
            raise ValueError(
                f"{source}: unknown section(s) {unknown}; expected {', '.join(SECTIONS)}"
            )
        model = values.get("model") or {"preset": "small"}
        data = rename_old_keys(_section(values, "data", source), OLD_DATA_KEYS, f"{source}: data")
        export = dict(_section(values, "export", source))
        search = dict(_section(values, "search", source))
        for key in [k for k in OLD_EXPORT_KEYS if k in export]:  # the old layout
            if key in search and search[key] != export[key]:
                raise ValueError(
                    f"{source}: export.{key}={export[key]!r} and search.{key}={search[key]!r}: "
                    f"{key} is a search setting now; give it once, under search"
                )
            search[key] = export.pop(key)
        return cls(
            model=ModelSettings.from_dict(_mapping(model, "model", source), source),
            data=_fields(DataSettings, data, "data", source),
            training=_fields(
                TrainingSettings, _section(values, "training", source), "training", source
            ),
            search=_fields(SearchSettings, search, "search", source),
            export=_fields(ServingSettings, export, "export", source),
        )

    @classmethod
    def load(cls, path, overrides=()) -> TrainingConfig:
        """Reads YAML/JSON and applies ``section.field=value`` overrides (values parsed as YAML)."""
        values = load_mapping(path)
        apply_overrides(values, overrides)
        return cls.from_dict(values, source=str(path))

    def to_dict(self) -> dict:
        return {
            "model": self.model.to_dict(),
            "data": dataclasses.asdict(self.data),
            "training": dataclasses.asdict(self.training),
            "search": dataclasses.asdict(self.search),
            "export": {  # a list of names (export.ensemble) as a YAML list
                name: list(value) if isinstance(value, tuple) else value
                for name, value in dataclasses.asdict(self.export).items()
            },
        }

    def save(self, path) -> None:
        import yaml

        pathlib.Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    def model_config(self, vocab_size: int | None = None) -> TransformerConfig:
        """The TransformerConfig of this run for a shared vocabulary of ``vocab_size``."""
        return self.model.model_config(vocab_size)


def _mapping(value, name: str, source: str) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{source}: '{name}' must be a mapping of field names to values")
    return value


def _section(values: dict, name: str, source: str) -> dict:
    return _mapping(values.get(name) or {}, name, source)


def _fields(klass, given: dict, name: str, source: str):
    known = {field.name for field in dataclasses.fields(klass)}
    bad = sorted(set(given) - known)
    if bad:
        raise ValueError(f"{source}: unknown field(s) {bad} in '{name}'; known: {sorted(known)}")
    given = {name: _yaml11_float(value) for name, value in given.items()}
    for field in dataclasses.fields(klass):
        if field.name in given and not _has_type(given[field.name], str(field.type)):
            raise ValueError(
                f"{source}: {name}.{field.name}={given[field.name]!r} is not of type {field.type}"
            )
    try:
        return klass(**given)
    except ValueError as error:  # a value __post_init__ refuses
        raise ValueError(f"{source}: {error}") from None


def _yaml11_float(value):
    """``1e-4`` as a float: PyYAML follows YAML 1.1, which reads an exponent without a dot
    (``1e-4``, unlike ``1.0e-4``) as a string."""
    if isinstance(value, str) and _EXPONENT_FLOAT.fullmatch(value.strip()):
        return float(value)
    return value


_EXPONENT_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
_TYPES = {
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "bool": (bool,),
    "list": (list,),
    "None": (),
}


def _has_type(value, annotation: str) -> bool:
    """Whether ``value`` fits a field annotation such as ``"float | None"`` (bool is not int)."""
    names = [name.strip() for name in annotation.split("|")]
    if value is None:
        return "None" in names
    if isinstance(value, bool):
        return "bool" in names
    return any(isinstance(value, _TYPES.get(name, (object,))) for name in names)


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


def data_path(path: str | None):
    """Resolves a corpus path against ``KT_DATA_DIR`` (default ``../shared/data``): a
    ``pathlib.Path``, or for a URL (``gs://b/prep``) a ``GFilePath`` (read by ``tf.io.gfile``)."""
    if path is None:
        return None
    if "://" in str(path):  # checked first: the import loads TensorFlow
        from keras_transformer.text.urlpath import GFilePath, is_url

        if is_url(path):
            return GFilePath(path)
    path = pathlib.Path(os.path.expanduser(path))
    if path.is_absolute() or path.exists():
        return path
    return data_dir() / path


# The checkout that holds this package (an editable install or a source tree).
_CHECKOUT = pathlib.Path(__file__).resolve().parents[2]


def data_dir() -> pathlib.Path:
    """The corpora folder: ``KT_DATA_DIR`` when set, else ``shared/data`` beside the checkout
    that holds this package (``../shared/data`` from its root), whatever the working directory;
    for an installed package outside a checkout, ``../shared/data`` from the working directory."""
    if os.environ.get("KT_DATA_DIR"):
        return pathlib.Path(os.path.expanduser(os.environ["KT_DATA_DIR"]))
    beside_checkout = _CHECKOUT.parent / "shared" / "data"
    if (_CHECKOUT / "keras_transformer").is_dir() and (_CHECKOUT / "setup.cfg").is_file():
        return beside_checkout
    return pathlib.Path.cwd().parent / "shared" / "data"
