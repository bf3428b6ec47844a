# Paper section 5.1's batches (by length, ~25000 tokens), repeated without end for training, in
# segments, so that a resumed run starts in the segment of its next batch instead of replaying
# every batch it trained on.
"""The endless training stream in segments: start at any batch without replaying the run.

Segment ``k`` of the stream is ``passes`` passes over the corpus, shuffled with the seed
``segment_seed(seed, k)`` (and reshuffled on every pass), cut into token-budget batches by length
(``make_dataset``'s buckets), each bucket's partial batch flushed at the segment's end. Two facts
make a start at batch ``b`` cheap:

- a segment's batches depend on its seed alone, not on the segments before it;
- its number of batches does not depend on the order of its examples: a bucket that receives
  ``n`` examples gives ``ceil(n / its batch size)`` batches. So it is counted from the examples'
  lengths (``segment_batches``), without shuffling or padding anything; for prepared shards
  from the manifest's count of kept pairs by length (``kept_by_length``), without reading them.

The stream that starts at batch ``b`` begins at segment ``b // n`` and skips ``b % n`` batches of
it: the segments before are never read. Segment 0 is shuffled exactly as
``make_dataset(repeat=True)`` shuffles (``seed`` joined with the global seed, as
``Dataset.shuffle`` does), so a run that stays in it trains on the batches it did before
segments; the order of later segments depends on ``seed`` alone, not on the global seed.
``passes`` makes a segment at least ``segment_pairs`` pairs (default 1,000,000): Multi30k
(29,000 pairs) has 35 passes a segment, so its partial batches come rarely; a WMT14-sized corpus
(4.5 million) has one, so a resume reads at most one pass again.

Example::

    stream = training_stream(pairs, tok, corpus_pairs=29000, tokens_per_batch=4096,
                             max_sentence_length=100, seed=0, skip=1234)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from keras_transformer.data.buckets import (
    bucket_batches,
    bucket_sizes,
    check_budget,
    prepare_examples,
    to_model_batches,
)
from keras_transformer.data.tokenized import batched_ids, drop_reasons

__all__ = [
    "SEGMENT_PAIRS",
    "passes_per_segment",
    "segment_seed",
    "segment_batches",
    "batches_by_length",
    "training_stream",
]

#: Pairs a segment holds at least (in whole passes over the corpus).
SEGMENT_PAIRS = 1_000_000
#: Segment ``k`` shuffles with ``seed + k * SEED_STRIDE`` (segment 0: the seed itself).
SEED_STRIDE = 1_000_003
_LAST_SEGMENT = 2**62


def passes_per_segment(corpus_pairs: int, segment_pairs: int = SEGMENT_PAIRS) -> int:
    """Passes over a corpus of ``corpus_pairs`` pairs that make at least ``segment_pairs``."""
    if corpus_pairs < 1:
        raise ValueError(f"corpus_pairs={corpus_pairs}: the corpus has no pair")
    return max(1, math.ceil(segment_pairs / corpus_pairs))


def segment_seed(seed, segment):
    """The shuffle seed of segment ``segment`` (a Python int or an int64 tensor)."""
    return seed + segment * SEED_STRIDE


def segment_batches(
    pairs: tf.data.Dataset,
    tokenizer=None,
    *,
    passes: int,
    tokens_per_batch: int,
    max_sentence_length: int,
    boundaries: Sequence[int] | None = None,
    more_than: int | None = None,
) -> int:
    """Batches in one segment of ``passes`` passes, counted from the kept examples' lengths.

    With ``more_than``, the count may stop early at any number above it (reading only as much
    of the corpus as shows that the segment has more batches than that).
    """
    bounds, batch_sizes = bucket_sizes(boundaries, max_sentence_length, tokens_per_batch)
    sizes = np.asarray(batch_sizes, dtype=np.int64)

    def kept_lengths(source, target):
        kept = drop_reasons(source, target, max_sentence_length) == 0
        longer = tf.maximum(source.row_lengths(), target.row_lengths()) + 1  # EOS (or BOS)
        return tf.boolean_mask(longer, kept)

    lengths = batched_ids(pairs, tokenizer, deterministic=False).map(
        kept_lengths, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False
    )
    per_bucket = np.zeros(len(sizes), dtype=np.int64)
    for chunk in lengths.prefetch(tf.data.AUTOTUNE).as_numpy_iterator():
        buckets = np.searchsorted(bounds, chunk, side="right")
        per_bucket += np.bincount(buckets, minlength=len(sizes))
        if more_than is not None and _batches(per_bucket, passes, sizes) > more_than:
            break  # a lower bound of the count is already above it
    return _batches(per_bucket, passes, sizes)


def batches_by_length(
    kept_by_length: Sequence[int],
    *,
    passes: int,
    tokens_per_batch: int,
    max_sentence_length: int,
    boundaries: Sequence[int] | None = None,
) -> int:
    """Batches in one segment of ``passes`` passes, from ``kept_by_length[L]``: the pairs whose
    longer side has ``L`` positions with its EOS (``pipelines.prepare``'s manifest has it). The
    pairs longer than ``max_sentence_length`` are dropped, as ``make_dataset`` drops them."""
    bounds, batch_sizes = bucket_sizes(boundaries, max_sentence_length, tokens_per_batch)
    counts = np.asarray(kept_by_length, dtype=np.int64)[: max_sentence_length + 1]
    buckets = np.searchsorted(bounds, np.arange(len(counts)), side="right")
    per_bucket = np.bincount(buckets, weights=counts, minlength=len(batch_sizes))
    return _batches(per_bucket.astype(np.int64), passes, np.asarray(batch_sizes, np.int64))


def _batches(per_bucket: np.ndarray, passes: int, sizes: np.ndarray) -> int:
    return int(np.sum(-(-(per_bucket * passes) // sizes)))


def training_stream(
    pairs: tf.data.Dataset,
    tokenizer=None,
    *,
    corpus_pairs: int,
    tokens_per_batch: int = 4096,
    max_sentence_length: int = 256,
    seed: int = 0,
    shuffle_buffer: int = 16384,
    skip: int = 0,
    segment_pairs: int = SEGMENT_PAIRS,
    boundaries: Sequence[int] | None = None,
    kept_by_length: Sequence[int] | None = None,
) -> tf.data.Dataset:
    """The endless, seeded stream of model batches (``make_dataset``'s format) from batch
    ``skip`` on; ``corpus_pairs``: the pairs in ``pairs`` (it sets the passes a segment).

    ``kept_by_length`` (id pairs from prepared shards: their manifest's count of pairs by
    length) lets a resumed stream find its segment without reading the corpus to count it."""
    check_budget(tokens_per_batch, max_sentence_length)
    passes = passes_per_segment(corpus_pairs, segment_pairs)
    examples, _ = prepare_examples(
        pairs,
        tokenizer,
        max_sentence_length,
        shuffle=False,
        shuffle_buffer=shuffle_buffer,
        seed=seed,
        deterministic=True,
        repeat=False,
        cache=False,
    )
    first, offset = 0, skip
    sizes = dict(
        passes=passes,
        tokens_per_batch=tokens_per_batch,
        max_sentence_length=max_sentence_length,
        boundaries=boundaries,
    )
    if skip and kept_by_length is not None:
        if sum(kept_by_length) != corpus_pairs:
            raise ValueError(
                f"kept_by_length counts {sum(kept_by_length)} pairs, corpus_pairs={corpus_pairs}"
            )
        per_segment = batches_by_length(kept_by_length, **sizes)
    elif skip:
        per_segment = segment_batches(pairs, tokenizer, more_than=skip, **sizes)
    if skip:
        if per_segment == 0:
            raise ValueError("the corpus has no pair that fits max_sentence_length")
        first, offset = divmod(skip, per_segment)

    def segment(seed_of_segment):
        shuffled = examples.shuffle(
            shuffle_buffer, seed=seed_of_segment, reshuffle_each_iteration=True
        )
        return bucket_batches(
            shuffled.repeat(passes), tokens_per_batch, max_sentence_length, boundaries
        )

    def later_segment(index):
        # tf.data joins an op's seed with the graph-level (global) seed, and fails on a tensor
        # op seed when the global seed is 0: this function's graph is cleared of it, so the
        # order of segments 1, 2, ... comes from (seed, segment) alone.
        tf.compat.v1.get_default_graph().seed = None
        return segment(segment_seed(seed, index))

    later = tf.data.Dataset.range(max(first, 1), _LAST_SEGMENT).flat_map(later_segment)
    # Segment 0 is shuffled as make_dataset(repeat=True) shuffles (its seed joined with the
    # global seed, as Dataset.shuffle does): a run shorter than a segment trains on the batches
    # it trained on before segments, and one resumed across the change goes on exactly.
    batches = segment(seed).concatenate(later) if first == 0 else later
    if offset:
        batches = batches.skip(offset)
    return to_model_batches(batches, deterministic=True)
