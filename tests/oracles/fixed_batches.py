"""Benchmark-only batching helpers: the fixed-size baseline for token-budget buckets.

Paper section 5.1 batches "sentence pairs ... by approximate sequence length"; the library's
``keras_transformer.data.make_dataset`` does that. These helpers measure what it buys: a
fixed ``batch_size`` pipeline that pads each batch to its longest pair, and the share of real
(non-padding) tokens in a batched dataset.

Example::

    from tests.oracles.fixed_batches import make_fixed_batch_dataset, padding_efficiency

    baseline = make_fixed_batch_dataset(pairs, tok, batch_size=64, seed=7)
    padding_efficiency(baseline)
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.data.buckets import prepare_examples, to_model_batches
from keras_transformer.text.tokenizer import PAD_ID

__all__ = ["make_fixed_batch_dataset", "padding_efficiency"]


def make_fixed_batch_dataset(
    pairs: tf.data.Dataset,
    tokenizer=None,
    batch_size: int = 64,
    max_sentence_length: int = 256,
    *,
    shuffle: bool = True,
    shuffle_buffer: int = 16384,
    seed: int | None = None,
    deterministic: bool | None = None,
    repeat: bool | int = False,
    drop_remainder: bool = False,
    cache: bool | str = False,
) -> tf.data.Dataset:
    """Fixed ``batch_size`` pairs per batch, padded to the longest: the baseline for bucketing.

    Same arguments and output structure as ``keras_transformer.data.make_dataset``.

    Example::

        baseline = make_fixed_batch_dataset(pairs, tok, batch_size=64, seed=7)
        padding_efficiency(baseline)
    """
    examples, deterministic = prepare_examples(
        pairs,
        tokenizer,
        max_sentence_length,
        shuffle=shuffle,
        shuffle_buffer=shuffle_buffer,
        seed=seed,
        deterministic=deterministic,
        repeat=repeat,
        cache=cache,
    )
    batches = examples.padded_batch(
        batch_size,
        padded_shapes=([None], [None]),
        padding_values=(PAD_ID, PAD_ID),
        drop_remainder=drop_remainder,
    )
    return to_model_batches(batches, deterministic)


def padding_efficiency(dataset: tf.data.Dataset, max_batches: int | None = None) -> float:
    """Real tokens / all token slots of source and target over a batched dataset.

    Real tokens are non-PAD ids of ``inputs["source"]`` and ``inputs["target"]``; slots are their
    sizes (``B*S + B*T``). 1.0 means no padding at all.

    Example::

        padding_efficiency(make_dataset(pairs, tok))   # ~0.9 on Multi30k
    """
    if max_batches is not None:
        dataset = dataset.take(max_batches)

    def counts(inputs, labels):
        del labels
        real = tf.zeros([], tf.int64)
        slots = tf.zeros([], tf.int64)
        for key in ("source", "target"):
            real += tf.math.count_nonzero(inputs[key] != PAD_ID, dtype=tf.int64)
            slots += tf.size(inputs[key], out_type=tf.int64)
        return tf.stack([real, slots])

    totals = dataset.map(counts).reduce(tf.zeros([2], tf.int64), lambda a, b: a + b).numpy()
    if totals[1] == 0:
        raise ValueError("padding_efficiency: the dataset has no tokens")
    return float(totals[0] / totals[1])
