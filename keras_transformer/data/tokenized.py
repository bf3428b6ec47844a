# Paper section 5.1: sentences "encoded using byte-pair encoding" before batching. This module
# turns string pairs into subword id pairs and decides which pairs training keeps.
"""Tokenize (source, target) pairs in batches; drop empty and over-long pairs; count them.

The filter used everywhere (``make_dataset``, ``count_pairs``, ``pipelines.prepare``): a pair
is dropped as ``"empty"`` when either side has no subwords, and as ``"too_long"`` when either
side needs more than ``max_sentence_length`` positions with its EOS (or BOS); see
``DROP_REASONS``. Kept pairs become model sequences with ``tokenization.with_eos``.

Example::

    ids = tokenize_pairs(read_parallel_text("train.en", "train.de"), tok)
    count_pairs(read_parallel_text("train.en", "train.de"), tok, max_sentence_length=128)
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.text.tokenizer import with_eos

__all__ = [
    "DROP_REASONS",
    "TOKENIZE_BATCH",
    "batched_ids",
    "drop_reasons",
    "tokenize_pairs",
    "count_pairs",
    "model_sequences",
]

AUTOTUNE = tf.data.AUTOTUNE

#: Why ``count_pairs`` / the pipeline drop a pair; index = reason code used internally.
DROP_REASONS = ("kept", "empty", "too_long")

#: Sentences tokenized per SentencePiece call (batch -> tokenize -> unbatch is far faster than
#: tokenizing one example at a time).
TOKENIZE_BATCH = 1024


def _is_text(pairs: tf.data.Dataset) -> bool:
    specs = pairs.element_spec
    if not (isinstance(specs, tuple) and len(specs) == 2):
        raise TypeError(f"expected a dataset of (source, target) pairs, got {specs}")
    dtypes = {spec.dtype for spec in specs}
    if dtypes == {tf.string}:
        return True
    if all(d.is_integer for d in dtypes):
        return False
    raise TypeError(f"pairs must be two strings or two int id sequences, got {specs}")


def _ragged_int32(ids):
    if isinstance(ids, tf.Tensor):
        ids = tf.RaggedTensor.from_tensor(ids)
    return tf.cast(ids, tf.int32)


def as_dense(ids):
    """A ragged row (after ``unbatch``) -> a dense vector; dense input passes through."""
    return ids.to_tensor() if isinstance(ids, tf.RaggedTensor) else ids


def batched_ids(
    pairs: tf.data.Dataset, tokenizer, deterministic, batch_size: int = TOKENIZE_BATCH
) -> tf.data.Dataset:
    """(source, target) strings or id vectors -> batches of ragged int32 id pairs, no BOS/EOS.

    Example::

        for source, target in batched_ids(pairs, tok, deterministic=True).take(1):
            source.shape   # [1024, None]
    """
    if _is_text(pairs):
        if tokenizer is None:
            raise ValueError("text pairs need a tokenizer")

        def tokenize(source, target):
            return tokenizer.tokenize(source), tokenizer.tokenize(target)

        return pairs.batch(batch_size).map(
            tokenize, num_parallel_calls=AUTOTUNE, deterministic=deterministic
        )

    def to_int32(source, target):
        return _ragged_int32(source), _ragged_int32(target)

    return pairs.ragged_batch(batch_size).map(
        to_int32, num_parallel_calls=AUTOTUNE, deterministic=deterministic
    )


def drop_reasons(source, target, max_sentence_length):
    """Reason codes (index into ``DROP_REASONS``) for a batch of ragged id pairs (no EOS yet)."""
    source_length = source.row_lengths()
    target_length = target.row_lengths()
    empty = (source_length == 0) | (target_length == 0)
    too_long = (source_length + 1 > max_sentence_length) | (target_length + 1 > max_sentence_length)
    return tf.where(empty, 1, tf.where(too_long, 2, 0))


def tokenize_pairs(
    pairs: tf.data.Dataset, tokenizer, *, deterministic: bool | None = None
) -> tf.data.Dataset:
    """String pairs -> (source_ids, target_ids) int32 vectors, no BOS/EOS, nothing dropped.

    Tokenizes in batches of ``TOKENIZE_BATCH`` sentences in parallel. Id pairs pass through
    (cast to int32).

    Example::

        ids = tokenize_pairs(read_parallel_text("train.en", "train.de"), tok)
    """
    return (
        batched_ids(pairs, tokenizer, deterministic)
        .unbatch()
        .map(lambda s, t: (as_dense(s), as_dense(t)))
    )


def count_pairs(pairs: tf.data.Dataset, tokenizer=None, max_sentence_length: int = 256) -> dict:
    """Count the pairs that ``make_dataset`` keeps and drops, by reason.

    Returns ``{"total", "kept", "empty", "too_long", "source_tokens", "target_tokens"}`` (token
    counts of kept pairs, without EOS/BOS). ``empty``: either side has no tokens; ``too_long``:
    either side needs more than ``max_sentence_length`` positions with its EOS/BOS.

    Example::

        count_pairs(read_parallel_text("train.en", "train.de"), tok, max_sentence_length=128)
    """

    def counts(source, target):
        reason = drop_reasons(source, target, max_sentence_length)
        kept = reason == 0
        by_reason = tf.math.bincount(
            tf.cast(reason, tf.int32),
            minlength=len(DROP_REASONS),
            maxlength=len(DROP_REASONS),
            dtype=tf.int64,
        )
        tokens = tf.stack(
            [
                tf.reduce_sum(tf.where(kept, source.row_lengths(), 0)),
                tf.reduce_sum(tf.where(kept, target.row_lengths(), 0)),
            ]
        )
        return tf.concat([by_reason, tf.cast(tokens, tf.int64)], axis=0)

    batches = batched_ids(pairs, tokenizer, deterministic=False).map(
        counts, num_parallel_calls=AUTOTUNE, deterministic=False
    )
    total = batches.reduce(tf.zeros([len(DROP_REASONS) + 2], tf.int64), lambda a, b: a + b)
    values = [int(v) for v in total.numpy()]
    result = dict(zip(DROP_REASONS, values, strict=False))
    result["total"] = sum(values[: len(DROP_REASONS)])
    result["source_tokens"], result["target_tokens"] = values[len(DROP_REASONS) :]
    return result


def model_sequences(
    pairs: tf.data.Dataset, tokenizer, max_sentence_length: int, deterministic
) -> tf.data.Dataset:
    """Pairs -> kept examples ``(source + EOS, target + EOS)`` as int32 vectors.

    Example::

        examples = model_sequences(pairs, tok, max_sentence_length=256, deterministic=True)
    """

    def add_eos_and_filter(source, target):
        keep = drop_reasons(source, target, max_sentence_length) == 0
        source = tf.ragged.boolean_mask(source, keep)
        target = tf.ragged.boolean_mask(target, keep)
        return with_eos(source), with_eos(target)

    batches = batched_ids(pairs, tokenizer, deterministic).map(
        add_eos_and_filter, num_parallel_calls=AUTOTUNE, deterministic=deterministic
    )
    return batches.unbatch().map(lambda s, t: (as_dense(s), as_dense(t)))
