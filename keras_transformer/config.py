"""Model hyper-parameters (paper Table 3) as one validated dataclass, loadable from YAML or JSON."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any, Optional

_NORMS = ("post", "pre")
_POSITIONALS = ("sinusoidal", "learned")


@dataclasses.dataclass
class TransformerConfig:
    """Hyper-parameters of an encoder-decoder Transformer.

    Field names follow the paper's Table 3: ``num_layers`` is N, ``d_model``, ``d_ff``,
    ``num_heads`` is h, ``dropout`` is P_drop. ``target_vocab_size`` defaults to
    ``source_vocab_size``; with ``shared_embeddings`` one matrix serves the encoder input, the
    decoder input and the pre-softmax projection (section 3.4), which needs equal sizes.

    Example:

    >>> config = TransformerConfig.base(vocab_size=37000)
    >>> config.d_model, config.num_heads, config.d_model // config.num_heads
    (512, 8, 64)
    >>> TransformerConfig.from_dict({**config.to_dict(), "num_layers": 2}).num_layers
    2
    """

    source_vocab_size: int
    target_vocab_size: Optional[int] = None
    num_layers: int = 6
    d_model: int = 512
    num_heads: int = 8
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    max_length: int = 256
    norm: str = "post"
    positional: str = "sinusoidal"
    shared_embeddings: bool = True
    layer_norm_epsilon: float = 1e-6

    def __post_init__(self):
        if self.target_vocab_size is None:
            self.target_vocab_size = self.source_vocab_size
        self.validate()

    # ------------------------------------------------------------------ validation
    def validate(self) -> "TransformerConfig":
        """Raises ``ValueError`` naming the first impossible field."""

        def fail(field, message):
            raise ValueError(f"TransformerConfig.{field}={getattr(self, field)!r}: {message}")

        for field in ("source_vocab_size", "target_vocab_size", "num_layers", "d_model",
                      "num_heads", "d_ff", "max_length"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int):
                fail(field, "must be an integer")
            if value <= 0:
                fail(field, "must be positive")
        if self.source_vocab_size < 4:
            fail("source_vocab_size", "must hold at least the 4 reserved ids (pad, unk, bos, eos)")
        if self.target_vocab_size < 4:
            fail("target_vocab_size", "must hold at least the 4 reserved ids (pad, unk, bos, eos)")
        if self.d_model % self.num_heads:
            fail("d_model", f"must be divisible by num_heads={self.num_heads} (d_k = d_model / h)")
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
        if not isinstance(self.shared_embeddings, bool):
            fail("shared_embeddings", "must be true or false")
        if self.shared_embeddings and self.source_vocab_size != self.target_vocab_size:
            fail("shared_embeddings", "needs source_vocab_size == target_vocab_size; "
                 f"got {self.source_vocab_size} and {self.target_vocab_size}")
        if not 0 < self.layer_norm_epsilon < 1:
            fail("layer_norm_epsilon", "must be in (0, 1)")
        return self

    @property
    def key_dim(self) -> int:
        """d_k = d_v = d_model / h (section 3.2.2)."""
        return self.d_model // self.num_heads

    # ------------------------------------------------------------------ presets
    @classmethod
    def base(cls, vocab_size: int, **overrides) -> "TransformerConfig":
        """The paper's base model (Table 3): N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1."""
        return cls(**{**dict(source_vocab_size=vocab_size, num_layers=6, d_model=512,
                             num_heads=8, d_ff=2048, dropout=0.1), **overrides})

    @classmethod
    def big(cls, vocab_size: int, **overrides) -> "TransformerConfig":
        """The paper's big model (Table 3): N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3."""
        return cls(**{**dict(source_vocab_size=vocab_size, num_layers=6, d_model=1024,
                             num_heads=16, d_ff=4096, dropout=0.3), **overrides})

    @classmethod
    def small(cls, vocab_size: int, **overrides) -> "TransformerConfig":
        """A CPU-sized model for Multi30k-scale corpora: N=3, d_model=256, d_ff=1024, h=4."""
        return cls(**{**dict(source_vocab_size=vocab_size, num_layers=3, d_model=256,
                             num_heads=4, d_ff=1024, dropout=0.1, max_length=128), **overrides})

    @classmethod
    def tiny(cls, vocab_size: int, **overrides) -> "TransformerConfig":
        """A model for tests and smoke runs: N=2, d_model=32, d_ff=64, h=4."""
        return cls(**{**dict(source_vocab_size=vocab_size, num_layers=2, d_model=32,
                             num_heads=4, d_ff=64, dropout=0.1, max_length=64), **overrides})

    @classmethod
    def preset(cls, name: str, vocab_size: int, **overrides) -> "TransformerConfig":
        """Looks a preset up by name: ``base``, ``big``, ``small`` or ``tiny``."""
        presets = {"base": cls.base, "big": cls.big, "small": cls.small, "tiny": cls.tiny}
        if name not in presets:
            raise ValueError(f"Unknown preset {name!r}; choose one of {sorted(presets)}")
        return presets[name](vocab_size, **overrides)

    # ------------------------------------------------------------------ (de)serialization
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "TransformerConfig":
        """Builds a config from a dict, rejecting unknown keys by name."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"Unknown TransformerConfig field(s) {unknown}; known: {sorted(known)}")
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
    def load(cls, path) -> "TransformerConfig":
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
