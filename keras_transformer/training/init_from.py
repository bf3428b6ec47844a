"""Starting a run from a trained model (fine-tuning on new data): ``training.init_from``.

``init_from`` names a run directory or one weights file of a run (``averaged.keras``,
``model.keras`` or ``checkpoints/ckpt-N.weights.h5``). The new run takes from it:

- the weights (from a run directory: ``averaged.keras`` if present, else ``model.keras``, else
  the last checkpoint);
- the tokenizer, so the vocabulary stays. Words of the new data that the old vocabulary lacks
  are split into more and shorter pieces, and characters it never saw into UTF-8 byte pieces
  (SentencePiece's byte fallback, on by default): nothing becomes UNK, but no new piece is
  learned, and sentences get longer (``results/finetune_newstest.md`` measures how much).
  Unless ``data.tokenizer`` (``train --tokenizer``) names another: then the vocabulary is
  updated, each piece of both keeping its rows, each new one starting from the rows of the old
  pieces that spell it (``vocab_update.py``), and the vocabulary size may change;
- nothing else: the optimizer and the schedule start afresh, with the new config's warm-up and
  rate. The model's shape (layers, widths, heads, vocabulary, positions) must be the old one's;
  ``dropout``, ``attention_dropout``, ``attention_window``, ``fast_kernels`` and
  ``layer_norm_epsilon`` may change.

The run's ``config.yaml`` records the weights file it started from in ``training.init_from``.
A killed fine-tuning run resumes from its own backup, not from ``init_from`` again.
"""

from __future__ import annotations

import dataclasses
import pathlib

from keras_transformer.config import TransformerConfig
from keras_transformer.training.run_config import TrainingConfig
from keras_transformer.training.run_dir import (
    AVERAGED_FILE,
    CHECKPOINT_DIR,
    MODEL_FILE,
    RUN_CONFIG,
    TOKENIZER_DIR,
    check_run_dir,
    list_checkpoints,
)

__all__ = ["InitSource", "MAY_CHANGE", "load_init_weights", "resolve_init_from"]

# A vocabulary update (another tokenizer than the source's) changes these.
VOCABULARY_FIELDS = ("source_vocab_size", "target_vocab_size")

# TransformerConfig fields a fine-tuning run may set anew: they leave every weight's shape as is.
MAY_CHANGE = (
    "dropout",
    "attention_dropout",
    "attention_window",
    "fast_kernels",
    "positional_stddev",  # the learned table's start, overwritten by the weights
    "layer_norm_epsilon",
)


@dataclasses.dataclass(frozen=True)
class InitSource:
    """Where a fine-tuning run starts: the weights file, its run and that run's model."""

    weights: pathlib.Path
    run_dir: pathlib.Path
    model_config: TransformerConfig

    @property
    def tokenizer_dir(self) -> pathlib.Path:
        return self.run_dir / TOKENIZER_DIR


def resolve_init_from(value) -> InitSource:
    """Reads ``training.init_from``: a run directory or a ``.keras`` / ``.weights.h5`` file of
    one. Raises ``FileNotFoundError`` / ``ValueError`` naming the setting."""
    path = pathlib.Path(value)
    key = f"training.init_from={value}"
    if path.is_dir():
        run_dir = _run_dir(path, key)
        weights = _run_weights(run_dir, key)
    elif path.is_file():
        if not (path.name.endswith(".keras") or path.name.endswith(".weights.h5")):
            raise ValueError(f"{key}: expected a run directory, a .keras or a .weights.h5 file")
        parent = path.parent.parent if path.parent.name == CHECKPOINT_DIR else path.parent
        run_dir, weights = _run_dir(parent, key), path
    else:
        raise FileNotFoundError(f"{key}: no such run directory or weights file")
    if not (run_dir / TOKENIZER_DIR).is_dir():
        raise FileNotFoundError(f"{key}: {run_dir} has no {TOKENIZER_DIR}/ to start from")
    config = TrainingConfig.load(run_dir / RUN_CONFIG)
    return InitSource(weights, run_dir, config.model_config())


def _run_dir(path: pathlib.Path, key: str) -> pathlib.Path:
    try:
        run_dir = check_run_dir(path)
    except FileNotFoundError as error:
        raise FileNotFoundError(f"{key}: {error}") from error
    if not (run_dir / RUN_CONFIG).is_file():
        raise FileNotFoundError(f"{key}: {run_dir} has no {RUN_CONFIG}")
    return run_dir


def _run_weights(run_dir: pathlib.Path, key: str) -> pathlib.Path:
    """A run's best weights to start from: averaged, else final, else the last checkpoint."""
    for name in (AVERAGED_FILE, MODEL_FILE):
        if (run_dir / name).is_file():
            return run_dir / name
    checkpoints = list_checkpoints(run_dir / CHECKPOINT_DIR)
    if not checkpoints:
        raise FileNotFoundError(f"{key}: {run_dir} holds no weights yet")
    return checkpoints[-1]


def check_same_shape(
    source: InitSource, wanted: TransformerConfig, vocabulary_may_change: bool = False
) -> None:
    """Refuses a new model whose weights would not have the shapes of the source's (but for the
    vocabulary sizes when ``vocabulary_may_change``: a vocabulary update)."""
    may_change = MAY_CHANGE + (VOCABULARY_FIELDS if vocabulary_may_change else ())
    diffs = [
        f"model.{field.name}: {getattr(source.model_config, field.name)!r} in {source.run_dir}, "
        f"{getattr(wanted, field.name)!r} now"
        for field in dataclasses.fields(TransformerConfig)
        if field.name not in may_change
        and getattr(source.model_config, field.name) != getattr(wanted, field.name)
    ]
    if diffs:
        raise ValueError(
            f"training.init_from={source.weights}: the model must keep its shape "
            f"({'; '.join(diffs)}); only {', '.join(MAY_CHANGE)} may change"
        )


def load_init_weights(model, source: InitSource, tokenizer=None) -> str:
    """Loads the source's weights into ``model`` (built with a config that passed
    :func:`check_same_shape`); Keras 3 ``load_weights`` reads ``.keras`` and ``.weights.h5``.
    With a ``tokenizer`` (folder) of another vocabulary than the source's, the embedding rows
    follow the pieces (``vocab_update.py``). Returns what was done, for the log."""
    from keras_transformer.text.sentencepiece_file import read_model_proto

    old_proto = read_model_proto(source.tokenizer_dir)
    new_proto = read_model_proto(tokenizer) if tokenizer is not None else old_proto
    if new_proto == old_proto:
        model.load_weights(source.weights)
        return "the same vocabulary"
    from keras_transformer.model import build_transformer
    from keras_transformer.training.vocab_update import transfer_weights, vocabulary_map

    old_model = build_transformer(source.model_config)
    old_model.load_weights(source.weights)
    mapping = vocabulary_map(old_proto, new_proto)
    transfer_weights(old_model, model, mapping)
    return (
        f"a new vocabulary: {mapping.kept} pieces kept their rows, {mapping.added} new ones "
        "start from the rows of the old pieces that spell them"
    )
