# Paper section 5.1: "Sentence pairs were batched together by approximate sequence length. Each
# training batch contained a set of sentence pairs containing approximately 25000 source tokens
# and 25000 target tokens." Here: length buckets, each with a batch size under a token budget.
"""Token-budget batches grouped by length, in the model's batch format, ready for ``fit``.

Model batches are ``({"source": int32[B, S], "target": int32[B, T]}, labels int32[B, T])``::

    source = ids(source sentence) + [EOS]
    target = [BOS] + ids(target sentence)        (decoder input, shifted right)
    labels = ids(target sentence) + [EOS]
    padding = PAD_ID (0) everywhere

Example::

    train = make_dataset(read_parallel_text("train.en", "train.de"), tok, 4096, seed=7)
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import tensorflow as tf

from keras_transformer.data.tokenized import model_sequences
from keras_transformer.text.tokenizer import BOS_ID, EOS_ID, PAD_ID

__all__ = [
    "bucket_batches",
    "bucket_boundaries",
    "bucket_sizes",
    "check_budget",
    "make_dataset",
    "prepare_examples",
    "to_model_batches",
]

AUTOTUNE = tf.data.AUTOTUNE


def _to_model_batch(source, labels):
    """Padded (source + EOS, target + EOS) -> ({"source", "target"}, labels)."""
    batch = tf.shape(labels)[0]
    shifted = tf.concat([tf.fill([batch, 1], BOS_ID), labels[:, :-1]], axis=1)
    target = tf.where(shifted == EOS_ID, PAD_ID, shifted)  # the EOS moved right becomes padding
    return {"source": source, "target": target}, labels


def bucket_boundaries(max_sentence_length: int = 256, growth: float = 1.1, start: int = 2) -> list:
    """Length bucket boundaries: every length up to ~20, then ~10 % apart, all below the max.

    Example::

        bucket_boundaries(32)   # [2, 3, 4, ..., 20, 22, 24, 26, 28, 30]
    """
    boundaries, bound = [], start
    while bound < max_sentence_length:
        boundaries.append(bound)
        bound = max(bound + 1, int(bound * growth))
    return boundaries


def prepare_examples(
    pairs: tf.data.Dataset,
    tokenizer,
    max_sentence_length: int,
    *,
    shuffle: bool,
    shuffle_buffer: int,
    seed: int | None,
    deterministic: bool | None,
    repeat: bool | int,
    cache: bool | str,
):
    """Kept examples, cached / shuffled / repeated as asked -> ``(examples, deterministic)``.

    The step before batching, shared by ``make_dataset`` and the fixed-size baseline of the
    tests (``tests/oracles/fixed_batches.py``); ``deterministic`` comes back resolved (see
    ``make_dataset``).
    """
    if max_sentence_length < 2:
        raise ValueError(
            f"max_sentence_length={max_sentence_length} leaves no room for a token and EOS"
        )
    if deterministic is None:
        deterministic = seed is not None or not shuffle
    examples = model_sequences(pairs, tokenizer, max_sentence_length, deterministic)
    if cache:
        examples = examples.cache() if cache is True else examples.cache(os.fspath(cache))
    if shuffle:
        examples = examples.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        examples = examples.repeat(None if repeat is True else int(repeat))
    return examples, deterministic


def to_model_batches(batches: tf.data.Dataset, deterministic: bool) -> tf.data.Dataset:
    """Padded ``(source, labels)`` batches -> model batches, with options and prefetch."""
    batches = batches.map(_to_model_batch, num_parallel_calls=AUTOTUNE, deterministic=deterministic)
    options = tf.data.Options()
    options.deterministic = bool(deterministic)
    return batches.with_options(options).prefetch(AUTOTUNE)


def check_budget(tokens_per_batch: int, max_sentence_length: int) -> None:
    """Refuses a token budget under the longest pair allowed."""
    if tokens_per_batch < max_sentence_length:
        raise ValueError(
            f"tokens_per_batch={tokens_per_batch} must be >= max_sentence_length="
            f"{max_sentence_length} so the longest pair fits in a batch"
        )


def bucket_sizes(boundaries, max_sentence_length: int, tokens_per_batch: int):
    """Checked, sorted boundaries in (1, max] and the batch size of each bucket: the bucket of
    lengths ``[bounds[i - 1], bounds[i])`` is ``i``, lengths from ``bounds[-1]`` on the last."""
    bounds = sorted(set(int(b) for b in (boundaries or bucket_boundaries(max_sentence_length))))
    bounds = [b for b in bounds if 1 < b <= max_sentence_length]
    if not bounds:
        raise ValueError(f"no bucket boundary in (1, {max_sentence_length}]")
    longest = [b - 1 for b in bounds] + [max_sentence_length]
    return bounds, [max(1, tokens_per_batch // length) for length in longest]


def bucket_batches(
    examples: tf.data.Dataset,
    tokens_per_batch: int,
    max_sentence_length: int,
    boundaries: Sequence[int] | None = None,
    drop_remainder: bool = False,
) -> tf.data.Dataset:
    """Kept examples -> padded ``(source, labels)`` batches, grouped by length under the budget.

    A bucket's partial batch comes out when the examples end (unless ``drop_remainder``)."""
    bounds, batch_sizes = bucket_sizes(boundaries, max_sentence_length, tokens_per_batch)

    def length(source, labels):
        return tf.maximum(tf.shape(source)[0], tf.shape(labels)[0])

    return examples.bucket_by_sequence_length(
        length,
        bucket_boundaries=bounds,
        bucket_batch_sizes=batch_sizes,
        padded_shapes=([None], [None]),
        padding_values=(PAD_ID, PAD_ID),
        drop_remainder=drop_remainder,
    )


def make_dataset(
    pairs: tf.data.Dataset,
    tokenizer=None,
    tokens_per_batch: int = 4096,
    max_sentence_length: int = 256,
    *,
    shuffle: bool = True,
    shuffle_buffer: int = 16384,
    seed: int | None = None,
    deterministic: bool | None = None,
    repeat: bool | int = False,
    drop_remainder: bool = False,
    boundaries: Sequence[int] | None = None,
    cache: bool | str = False,
) -> tf.data.Dataset:
    """Token-budget batches grouped by length, ready for ``model.fit``.

    Args:
      pairs: dataset of (source, target) strings (``read_parallel_text``, ``read_tsv``,
        ``load_tfds``) or of int id vectors without BOS/EOS (``read_tfrecord_shards``).
      tokenizer: a ``SubwordTokenizer`` (needed for text pairs).
      tokens_per_batch: budget per batch, counted as ``batch * max(S, T)`` padded slots of the
        longer side (the paper used ~25000; 4096 suits a CPU).
      max_sentence_length: subwords per side, EOS (or BOS) included: pairs whose source + EOS
        or BOS + target exceed it are dropped, as are pairs with an empty side (see
        ``count_pairs`` for the numbers).
      shuffle / shuffle_buffer / seed: example shuffle before bucketing, reshuffled each epoch;
        the same seed gives the same batches in the same order.
      deterministic: keep element order through parallel maps; default: True when ``seed`` is
        given or ``shuffle`` is off.
      repeat: True (forever) or a number of epochs, applied before batching so batches cross
        epoch boundaries (use ``steps_per_epoch`` in ``fit``).
      drop_remainder: drop each bucket's last partial batch.
      boundaries: length bucket boundaries; default ``bucket_boundaries(max_sentence_length)``.
        A bucket ``[lo, hi)`` gets ``tokens_per_batch // (hi - 1)`` pairs per batch.
      cache: True caches tokenized examples in memory (good for Multi30k-sized corpora), a
        path caches them on disk.

    Returns:
      ``({"source": int32[B, S], "target": int32[B, T]}, labels int32[B, T])`` batches.

    Example::

        train = make_dataset(read_parallel_text("train.en", "train.de"), tok, 4096, seed=7)
        (inputs, labels), = train.take(1)
        inputs["source"].shape, inputs["target"].shape, labels.shape  # (B, S), (B, T), (B, T)
    """
    check_budget(tokens_per_batch, max_sentence_length)
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
    batches = bucket_batches(
        examples, tokens_per_batch, max_sentence_length, boundaries, drop_remainder
    )
    return to_model_batches(batches, deterministic)
