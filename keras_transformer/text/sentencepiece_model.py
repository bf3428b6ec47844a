# The SentencePiece model behind SubwordTokenizer (paper section 5.1: a shared byte-pair encoding):
# what it trains on, where a serialized model is read from, and the tensorflow-text op running it.
"""SentencePiece plumbing for ``keras_transformer.text.tokenizer``: training text, model protos.

* ``training_text``: sentences from files (strict UTF-8, ``.gz`` ok), strings or a dataset;
  ``sample_sentences``: a seeded reservoir sample of them, in corpus order.
* ``read_model_proto`` (``text/sentencepiece_file.py``, no TensorFlow needed): the serialized model
  from bytes, a ``.model`` file or a saved tokenizer folder (also one embedded in a bigger
  SavedModel), local or at a URL.
* ``graph_tokenizer``: a ``tensorflow_text.SentencepieceTokenizer`` whose resource survives
  ``tf.random.set_seed`` (tensorflow/text#570).

Example::

    sentences = sample_sentences(training_text(["train.en", "train.de"]), 2_000_000, seed=0)
    proto = read_model_proto("runs/tok/saved")
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Iterable, Iterator

import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.python.ops import sentencepiece_tokenizer as _tf_text_sentencepiece

from keras_transformer.text.lines import iter_lines
from keras_transformer.text.sentencepiece_file import (
    EXTRA_MODEL_FILE,
    MODEL_VARIABLE,
    read_model_proto,
)

__all__ = [
    "EXTRA_MODEL_FILE",
    "MODEL_VARIABLE",
    "training_text",
    "sample_sentences",
    "read_model_proto",
    "graph_tokenizer",
]


def _looks_like_file(item) -> bool:
    if isinstance(item, os.PathLike):
        return True
    return isinstance(item, str) and len(item) < 4096 and "\n" not in item and os.path.isfile(item)


def training_text(texts_or_files) -> Iterator[str]:
    """Sentences to train on: files (plain or ``.gz``; a ``PathLike`` or an existing file's
    ``str``), other strings / bytes as sentences, or a ``tf.data.Dataset`` of ``tf.string``."""
    if isinstance(texts_or_files, (str, os.PathLike)):
        texts_or_files = [texts_or_files]
    if isinstance(texts_or_files, tf.data.Dataset):
        for value in texts_or_files.as_numpy_iterator():
            yield value.decode("utf-8")
        return
    for item in texts_or_files:
        if _looks_like_file(item):
            yield from iter_lines(item, what="tokenizer training file")
        elif isinstance(item, bytes):
            yield item.decode("utf-8")
        else:
            yield str(item)


def sample_sentences(texts: Iterable[str], max_sentences: int, seed: int) -> list:
    """Reservoir sample of at most ``max_sentences`` non-empty lines, in corpus order, seeded."""
    rng = random.Random(seed)
    reservoir: list = []
    seen = 0
    for text in texts:
        if not text.strip():
            continue
        if len(reservoir) < max_sentences:
            reservoir.append((seen, text))
        else:
            slot = rng.randint(0, seen)
            if slot < max_sentences:
                reservoir[slot] = (seen, text)
        seen += 1
    reservoir.sort()
    return [text for _, text in reservoir]


class _SharedSentencepieceResource(_tf_text_sentencepiece._SentencepieceModelResource):
    """The SentencePiece model resource under a shared name, so that it outlives the kernel cache.

    tensorflow-text creates the resource as private to its kernel; ``tf.random.set_seed`` (and so
    ``keras.utils.set_random_seed``) clears the eager kernel cache and with it the resource, after
    which every tokenizer call fails with "Resource localhost/_0_SentencepieceOp/... does not
    exist" (tensorflow/text#570). A ``shared_name`` makes the resource manager own it instead. The
    name is the model's sha256, so tokenizers with the same model share one resource.
    """

    def __init__(self, model: bytes):
        self._shared_name = "kt_sentencepiece_" + hashlib.sha256(model).hexdigest()[:32]
        super().__init__(model, None)

    def _create_resource(self):
        with tf.name_scope("SentenceTokenizerInitializer"):
            return _tf_text_sentencepiece.gen_sentencepiece_tokenizer.sentencepiece_op(
                model=self._model, shared_name=self._shared_name
            )


def graph_tokenizer(proto: bytes) -> tf_text.SentencepieceTokenizer:
    tokenizer = tf_text.SentencepieceTokenizer(model=proto, out_type=tf.int32)
    # Swap in the shared-name resource (see _SharedSentencepieceResource). tensorflow-text is
    # pinned to TF's minor version; tests/test_tokenization.py fails if this attribute moves.
    if not hasattr(tokenizer, "_model_resource"):
        raise RuntimeError(
            "tensorflow_text.SentencepieceTokenizer has no _model_resource: "
            "update keras_transformer.text.tokenizer for this tensorflow-text"
        )
    tokenizer._model_resource = _SharedSentencepieceResource(proto)
    return tokenizer
