"""Model hyper-parameters (paper Table 3): ``TransformerConfig``, one validated dataclass loadable
from YAML or JSON, and ``ModelSettings``, the ``model:`` section of a run config (a preset plus
the fields it changes) that resolves to a ``TransformerConfig``."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

_NORMS = ("post", "pre")
_POSITIONALS = ("sinusoidal", "learned")
# The presets, as the TransformerConfig fields each sets (the rest keep their defaults).
PRESET_VALUES = {
    # Table 3 of the paper: the base and big models.
    "base": dict(num_layers=6, d_model=512, num_heads=8, d_ff=2048, dropout=0.1),
    "big": dict(num_layers=6, d_model=1024, num_heads=16, d_ff=4096, dropout=0.3),
    # A CPU-sized model for Multi30k-scale corpora, and one for tests and smoke runs.
    "small": dict(
        num_layers=3, d_model=256, num_heads=4, d_ff=1024, dropout=0.1, max_positions=128
    ),
    "tiny": dict(num_layers=2, d_model=32, num_heads=4, d_ff=64, dropout=0.1, max_positions=64),
}
PRESETS = tuple(PRESET_VALUES)


@dataclasses.dataclass
class TransformerConfig:
    """Hyper-parameters of an encoder-decoder Transformer.

    Field names follow the paper's Table 3: ``num_layers`` is N, ``d_model``, ``d_ff``,
    ``num_heads`` is h, ``dropout`` is P_drop. ``target_vocab_size`` defaults to
    ``source_vocab_size``; with ``shared_embeddings`` one matrix serves the encoder input, the
    decoder input and the pre-softmax projection (section 3.4), which needs equal sizes.
    ``max_positions`` is the size of the positional table (the longest source or target the
    model reads); ``fast_kernels`` picks the layers' fast paths or the plain form.

    ``key_dim`` is d_k of each head: None means d_model / h (section 3.2.2); set, the heads
    may span ``key_dim * h != d_model``. ``value_dim`` is d_v: None means d_k, as in the paper;
    Table 3 row (B) reduces d_k alone (W^O maps h * d_v back to d_model). :attr:`head_dim` is
    the resolved d_k, :attr:`value_head_dim` the resolved d_v. ``attention_window`` is r of
    section 4: encoder and decoder self-attention see only keys within distance r (in the
    decoder the r previous positions and itself); encoder-decoder attention stays full. None:
    full attention. ``positional_stddev`` starts a learned positional table from a normal
    draw of that spread (None: Glorot uniform).

    Example:

    >>> config = TransformerConfig.base(vocab_size=37000)
    >>> config.d_model, config.num_heads, config.d_model // config.num_heads
    (512, 8, 64)
    >>> TransformerConfig.from_dict({**config.to_dict(), "num_layers": 2}).num_layers
    2
    """

    source_vocab_size: int
    target_vocab_size: int | None = None
    num_layers: int = 6
    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    max_positions: int = 256  # rows of the positional table: the longest source or target
    norm: str = "post"
    positional: str = "sinusoidal"
    shared_embeddings: bool = True
    layer_norm_epsilon: float = 1e-6
    # The layers' fast paths (results/benchmarks.md); False: the stock Keras/TF form of each
    # equation. Same weights and, within rounding, the same outputs (tests/test_fast_paths.py).
    fast_kernels: bool = True
    key_dim: int | None = None  # d_k per head; None: d_model / num_heads
    attention_window: int | None = None  # r: local restricted self-attention; None: full
    value_dim: int | None = None  # d_v per head; None: d_k
    # Learned positions' initial table: normal with this standard deviation (sqrt(1/2) is the
    # sinusoids' root mean square); None: Glorot uniform, far smaller at these table sizes.
    positional_stddev: float | None = None

    def __post_init__(self):
        if self.target_vocab_size is None:
            self.target_vocab_size = self.source_vocab_size
        self.validate()

    # ------------------------------------------------------------------ validation
    def validate(self) -> TransformerConfig:
        """Raises ``ValueError`` naming the first impossible field."""

        def fail(field, message):
            raise ValueError(f"TransformerConfig.{field}={getattr(self, field)!r}: {message}")

        for field in (
            "source_vocab_size",
            "target_vocab_size",
            "num_layers",
            "d_model",
            "num_heads",
            "d_ff",
            "max_positions",
        ):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                fail(field, "must be an integer")
            if value <= 0:
                fail(field, "must be positive")
        if self.source_vocab_size < 4:
            fail("source_vocab_size", "must hold at least the 4 reserved ids (pad, unk, bos, eos)")
        if self.target_vocab_size < 4:
            fail("target_vocab_size", "must hold at least the 4 reserved ids (pad, unk, bos, eos)")
        for field in ("key_dim", "value_dim", "attention_window"):
            message = _optional_positive(getattr(self, field))
            if message:
                fail(field, message)
        if self.key_dim is None and self.d_model % self.num_heads:
            fail(
                "d_model",
                f"must be divisible by num_heads={self.num_heads} (d_k = d_model / h), "
                "or set key_dim",
            )
        for field in ("dropout", "attention_dropout"):
            value = getattr(self, field)
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                fail(field, "must be a number")
            if not 0.0 <= value < 1.0:
                fail(field, "must be in [0, 1)")
        if self.norm not in _NORMS:
            fail("norm", f"must be one of {_NORMS}")
        if self.positional not in _POSITIONALS:
            fail("positional", f"must be one of {_POSITIONALS}")
        if self.positional_stddev is not None:
            value = self.positional_stddev
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                fail("positional_stddev", "must be a positive number (or null)")
            if self.positional != "learned":
                fail(
                    "positional_stddev", "sets the learned table's start: needs positional: learned"
                )
        for field in ("shared_embeddings", "fast_kernels"):
            if not isinstance(getattr(self, field), bool):
                fail(field, "must be true or false")
        if self.shared_embeddings and self.source_vocab_size != self.target_vocab_size:
            fail(
                "shared_embeddings",
                "needs source_vocab_size == target_vocab_size; "
                f"got {self.source_vocab_size} and {self.target_vocab_size}",
            )
        if not 0 < self.layer_norm_epsilon < 1:
            fail("layer_norm_epsilon", "must be in (0, 1)")
        return self

    @property
    def head_dim(self) -> int:
        """d_k of each head: ``key_dim``, or d_model / h (section 3.2.2) when it is None."""
        return self.key_dim if self.key_dim is not None else self.d_model // self.num_heads

    @property
    def value_head_dim(self) -> int:
        """d_v of each head: ``value_dim``, or d_k when it is None (the paper's d_k = d_v)."""
        return self.value_dim if self.value_dim is not None else self.head_dim

    # ------------------------------------------------------------------ presets
    @classmethod
    def preset(cls, name: str, vocab_size: int, **overrides) -> TransformerConfig:
        """A preset of :data:`PRESET_VALUES` by name (``base``, ``big``, ``small``, ``tiny``) for
        a shared vocabulary of ``vocab_size``, with ``overrides``."""
        if name not in PRESET_VALUES:
            raise ValueError(f"Unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        return cls(**{"source_vocab_size": vocab_size, **PRESET_VALUES[name], **overrides})

    @classmethod
    def base(cls, vocab_size: int, **overrides) -> TransformerConfig:
        """The paper's base model (Table 3): N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1."""
        return cls.preset("base", vocab_size, **overrides)

    @classmethod
    def big(cls, vocab_size: int, **overrides) -> TransformerConfig:
        """The paper's big model (Table 3): N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3."""
        return cls.preset("big", vocab_size, **overrides)

    @classmethod
    def small(cls, vocab_size: int, **overrides) -> TransformerConfig:
        """A CPU-sized model for Multi30k-scale corpora: N=3, d_model=256, d_ff=1024, h=4."""
        return cls.preset("small", vocab_size, **overrides)

    @classmethod
    def tiny(cls, vocab_size: int, **overrides) -> TransformerConfig:
        """A model for tests and smoke runs: N=2, d_model=32, d_ff=64, h=4."""
        return cls.preset("tiny", vocab_size, **overrides)

    # ------------------------------------------------------------------ (de)serialization
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        """Builds a config from a dict, rejecting unknown keys by name.

        The old name ``max_length`` of ``max_positions`` (run directories and ``.keras`` files
        written before the rename) is read as ``max_positions``.
        """
        values = rename_old_keys(values, OLD_MODEL_KEYS, "TransformerConfig")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"Unknown TransformerConfig field(s) {unknown}; known: {sorted(known)}"
            )
        return cls(**values)

    def save(self, path) -> None:
        """Writes the config as YAML (``.yaml``/``.yml``) or JSON (anything else)."""
        path = pathlib.Path(path)
        if path.suffix in (".yaml", ".yml"):
            import yaml

            path.write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))
        else:
            path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path) -> TransformerConfig:
        """Reads a YAML or JSON file written by :meth:`save` (or by hand).

        A file with a ``model:`` section (a training config) is read from that section.
        """
        path = pathlib.Path(path)
        values = load_mapping(path)
        if "model" in values and isinstance(values["model"], dict):
            values = values["model"]
        try:
            return cls.from_dict(values)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path}: {error}") from error


# Old key -> new key, for files written before a rename (no warning: old run directories are fine).
OLD_MODEL_KEYS = {"max_length": "max_positions"}


def rename_old_keys(values: dict, renames: dict, where: str) -> dict:
    """A copy of ``values`` with each old key of ``renames`` under its new name.

    >>> rename_old_keys({"max_length": 64}, OLD_MODEL_KEYS, "model")
    {'max_positions': 64}
    """
    values = dict(values)
    for old, new in renames.items():
        if old in values:
            if new in values:
                raise ValueError(f"{where}: give {new!r} only ({old!r} is its old name)")
            values[new] = values.pop(old)
    return values


class ModelSettings:
    """The ``model:`` section of a run config: a preset and the TransformerConfig fields it
    changes, checked by name (no field is written twice: the names are TransformerConfig's).

    A field not set reads as ``None`` and takes the preset's value (without a preset:
    TransformerConfig's default). Vocabulary sizes usually come from the tokenizer, through
    :meth:`model_config`. The YAML shape is TransformerConfig's, flat, plus ``preset``:
    ``{preset: small, dropout: 0.2}``.

    Example:

    >>> settings = ModelSettings.from_dict({"preset": "small", "dropout": 0.2, "max_length": 96})
    >>> settings.to_dict()
    {'preset': 'small', 'dropout': 0.2, 'max_positions': 96}
    >>> settings.d_model is None, settings.dropout
    (True, 0.2)
    >>> config = settings.model_config(vocab_size=4000)
    >>> config.d_model, config.dropout, config.max_positions, config.target_vocab_size
    (256, 0.2, 96, 4000)
    """

    FIELDS = tuple(field.name for field in dataclasses.fields(TransformerConfig))

    def __init__(self, preset: str | None = None, **fields):
        if preset is not None and preset not in PRESETS:
            raise ValueError(f"model.preset={preset!r}: choose one of {list(PRESETS)}")
        unknown = sorted(set(fields) - set(self.FIELDS))
        if unknown:
            raise ValueError(f"model: unknown field(s) {unknown}; known: {sorted(self.FIELDS)}")
        for name in ("key_dim", "value_dim", "attention_window"):
            message = _optional_positive(fields.get(name))
            if message:
                raise ValueError(f"model.{name}={fields[name]!r}: {message}")
        vars(self)["preset"] = preset
        vars(self)["_set"] = {name: value for name, value in fields.items() if value is not None}

    def __getattr__(self, name):
        if name in ModelSettings.FIELDS:
            return self._set.get(name)
        raise AttributeError(f"'ModelSettings' object has no attribute {name!r}")

    def __setattr__(self, name, value):
        if name not in ModelSettings.FIELDS:
            raise AttributeError(f"ModelSettings: {name!r} is not a TransformerConfig field")
        if value is None:
            self._set.pop(name, None)
        else:
            self._set[name] = value

    def __eq__(self, other):
        if not isinstance(other, ModelSettings):
            return NotImplemented
        return (self.preset, self._set) == (other.preset, other._set)

    def __repr__(self):
        fields = ", ".join(f"{k}={v!r}" for k, v in self.to_dict().items())
        return f"ModelSettings({fields})"

    def overrides(self) -> dict:
        """The TransformerConfig fields that are set, by name."""
        return dict(self._set)

    def to_dict(self) -> dict:
        """The YAML form: ``preset`` (when set) and the set fields only."""
        return {**({"preset": self.preset} if self.preset else {}), **self.overrides()}

    @classmethod
    def from_dict(cls, values: dict, source: str = "config") -> ModelSettings:
        """Reads a ``model:`` section; unknown keys fail naming ``source``, old names are mapped."""
        values = rename_old_keys(values, OLD_MODEL_KEYS, f"{source}: model")
        unknown = sorted(set(values) - {"preset", *cls.FIELDS})
        if unknown:
            raise ValueError(
                f"{source}: unknown field(s) {unknown} in 'model'; known: {sorted(cls.FIELDS)}"
            )
        return cls(**values)

    @classmethod
    def from_config(cls, config: TransformerConfig) -> ModelSettings:
        """Every field of ``config``, no preset (what a run directory's config.yaml holds)."""
        return cls(**config.to_dict())

    def model_config(self, vocab_size: int | None = None) -> TransformerConfig:
        """The TransformerConfig: the preset, then the set fields; ``vocab_size`` fills in
        ``source_vocab_size`` when it is not set (``target_vocab_size`` follows it)."""
        values = self.overrides()
        values.setdefault("source_vocab_size", vocab_size)
        if values["source_vocab_size"] is None:
            raise ValueError("model.source_vocab_size: not set; pass the tokenizer's vocab_size")
        if self.preset:
            return TransformerConfig.preset(self.preset, values.pop("source_vocab_size"), **values)
        return TransformerConfig(**values)


def _optional_positive(value) -> str | None:
    """Why ``value`` is not None or a positive integer (None when it is)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        return "must be a positive integer or null"
    return None if value > 0 else "must be a positive integer or null"


def load_mapping(path) -> dict:
    """Reads a YAML or JSON file holding a mapping; errors name the file."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"Config file {path} does not exist")
    text = path.read_text()
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            values = yaml.safe_load(text)
        else:
            values = json.loads(text)
    except Exception as error:  # yaml.YAMLError / json.JSONDecodeError
        raise ValueError(f"{path}: cannot parse: {error}") from error
    if not isinstance(values, dict):
        raise ValueError(f"{path}: expected a mapping of field names to values")
    return values
