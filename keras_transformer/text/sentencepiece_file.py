"""Where a serialized SentencePiece model is read from: bytes, a ``.model`` file, or a saved
tokenizer folder (its ``assets.extra`` copy, else its checkpoint, also inside a bigger
SavedModel), local or at a URL. TensorFlow loads only to read a checkpoint or a URL, so a run's
tokenizer can be compared before the command line loads it."""

from __future__ import annotations

import os
import sys

from keras_transformer.text.urlpath import as_path

__all__ = ["EXTRA_MODEL_FILE", "MODEL_VARIABLE", "read_model_proto"]

#: Name of the tracked string variable holding the serialized SentencePiece model. `load` looks for
#: a checkpoint key ending in this name, so it also finds the tokenizer inside a bigger SavedModel.
MODEL_VARIABLE = "_sentencepiece_model"
_MODEL_KEY_SUFFIX = f"{MODEL_VARIABLE}/.ATTRIBUTES/VARIABLE_VALUE"
#: Plain copy of the model written next to a saved tokenizer, for tools outside TensorFlow.
EXTRA_MODEL_FILE = os.path.join("assets.extra", "sentencepiece.model")


def read_model_proto(model) -> bytes:
    """Serialized SentencePiece model from bytes, a ``.model`` file or a saved tokenizer folder."""
    if isinstance(model, (bytes, bytearray)):
        return bytes(model)
    tf = sys.modules.get("tensorflow")  # a tensor means TensorFlow is loaded
    if tf is not None and isinstance(model, tf.Tensor):
        return model.numpy()
    path = as_path(model)
    if path.is_dir():
        return _read_model_from_saved_model(path)
    if not path.is_file():
        raise FileNotFoundError(f"SentencePiece model not found: {path}")
    return path.read_bytes()


def _read_model_from_saved_model(path) -> bytes:
    extra = path / EXTRA_MODEL_FILE
    if extra.is_file():
        return extra.read_bytes()
    prefix = path / "variables" / "variables"
    if (path / "variables" / "variables.index").is_file():
        import tensorflow as tf

        keys = [name for name, _ in tf.train.list_variables(str(prefix))]
        matches = [k for k in keys if k.endswith(_MODEL_KEY_SUFFIX)]
        if len(matches) == 1:
            return tf.train.load_variable(str(prefix), matches[0])
        if len(matches) > 1:
            raise ValueError(f"{path} holds {len(matches)} tokenizers ({matches}); load one by key")
    models = sorted(path.glob("*.model"))
    if len(models) == 1:
        return models[0].read_bytes()
    raise FileNotFoundError(
        f"no tokenizer in {path}: expected a SavedModel written by SubwordTokenizer.save "
        "or a single *.model file"
    )
