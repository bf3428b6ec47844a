# Paper section 5.1's batches (by length, ~25000 tokens), repeated without end for training, in
# segments, so that a resumed run starts in the segment of its next batch instead of replaying
# every batch it trained on.
"""The endless training stream in segments: start at any batch without replaying the run.

The corpus is one part, or several (``CorpusPart``: prepared shards in groups of at least
``segment_pairs`` pairs, ``group_shards``). Segment ``k`` reads part ``k % P`` of the ``P``
parts, ``passes`` times (``passes`` > 1 only for a corpus of one part smaller than
``segment_pairs``), shuffled with the seed ``segment_seed(seed, k)`` (and reshuffled on every
pass), cut into token-budget batches by length (``make_dataset``'s buckets), each bucket's
partial batch flushed at the segment's end. Two facts make a start at batch ``b`` cheap:

- a segment's batches depend on its seed and part alone, not on the segments before it;
- its number of batches does not depend on the order of its examples: a bucket that receives
  ``n`` examples gives ``ceil(n / its batch size)`` batches. So it is counted from the examples'
  lengths (``segment_batches``), without shuffling or padding anything; for prepared shards
  from the manifest's count of kept pairs by length (``kept_by_length``), without reading them.

The stream that starts at batch ``b`` begins in the segment that holds ``b`` and skips the
batches before ``b`` inside it: the segments before are never read. Segment 0 is shuffled
exactly as ``make_dataset(repeat=True)`` shuffles (``seed`` joined with the global seed, as
``Dataset.shuffle`` does), so with one part a run that stays in it trains on the batches it did
before segments; the order of later segments depends on ``seed`` alone, not on the global seed.
Multi30k (29,000 pairs, one part) has 35 passes a segment, so its partial batches come rarely;
a WMT14-sized corpus in 23 shards (4.5 million pairs) has four parts of 1.0-1.2 million pairs,
so a resume reads at most one part again, not the pass.

Example::

    stream = training_stream(pairs, tok, corpus_pairs=29000, tokens_per_batch=4096,
                             max_sentence_length=100, seed=0, skip=1234)
    parts = [CorpusPart(read_tfrecord_shards(files), count) for files, count in groups]
    stream = training_stream(parts, None, tokens_per_batch=25000, skip=1234)
"""

from __future__ import annotations

import dataclasses
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
    "CorpusPart",
    "group_shards",
    "passes_per_segment",
    "segment_seed",
    "segment_batches",
    "batches_by_length",
    "count_length",
    "add_length_counts",
    "training_stream",
    "MIXTURE_SEGMENT_BATCHES",
    "mixture_stream",
]

#: Pairs a segment holds at least (in whole passes over the corpus).
SEGMENT_PAIRS = 1_000_000
#: Segment ``k`` shuffles with ``seed + k * SEED_STRIDE`` (segment 0: the seed itself).
SEED_STRIDE = 1_000_003
_LAST_SEGMENT = 2**62
#: Batches in a segment of an endless mixture of corpora (``data.mix``: no pass to count).
MIXTURE_SEGMENT_BATCHES = 2000


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


# A prepared split's "kept_by_length" (pipelines.prepare's manifest): one list a shard, whose
# element L counts the shard's kept pairs whose longer side has L positions with its EOS, the
# length make_dataset's buckets sort by.
def count_length(kept_by_length: list, source_ids, target_ids) -> None:
    """Count one kept pair in ``kept_by_length`` (grown as needed)."""
    length = max(len(source_ids), len(target_ids)) + 1
    if length >= len(kept_by_length):
        kept_by_length.extend([0] * (length + 1 - len(kept_by_length)))
    kept_by_length[length] += 1


def add_length_counts(*all_kept_by_length) -> list:
    """Element-wise sum of ``kept_by_length`` lists of any lengths."""
    total = [0] * max((len(counts) for counts in all_kept_by_length), default=0)
    for counts in all_kept_by_length:
        for length, count in enumerate(counts):
            total[length] += count
    return total


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


@dataclasses.dataclass(frozen=True)
class CorpusPart:
    """A part of the corpus that a segment reads whole: its pairs (text or ids, one pass), how
    many, and, for prepared shards, the kept pairs by length (``batches_by_length``)."""

    pairs: tf.data.Dataset
    count: int
    kept_by_length: Sequence[int] | None = None


def group_shards(counts: Sequence[int], segment_pairs: int = SEGMENT_PAIRS) -> list[list[int]]:
    """Shard indices in consecutive groups of about equal pairs, as many groups as the corpus
    holds ``segment_pairs`` (at least one); ``counts``: the pairs of each shard."""
    total = sum(counts)
    groups = [[] for _ in range(max(1, min(len(counts), total // segment_pairs)))]
    before = 0
    for index, count in enumerate(counts):
        groups[min(len(groups) - 1, before * len(groups) // max(total, 1))].append(index)
        before += count
    return [group for group in groups if group]


def training_stream(
    pairs: tf.data.Dataset | Sequence[CorpusPart],
    tokenizer=None,
    *,
    corpus_pairs: int | None = None,
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
    ``skip`` on.

    ``pairs``: the corpus (then ``corpus_pairs``: how many, and for id pairs from prepared
    shards optionally ``kept_by_length``: their manifest's count of pairs by length, so that a
    resumed stream finds its segment without reading the corpus), or its ``CorpusPart``s."""
    check_budget(tokens_per_batch, max_sentence_length)
    parts = _as_parts(pairs, corpus_pairs, kept_by_length)
    passes = passes_per_segment(parts[0].count, segment_pairs) if len(parts) == 1 else 1
    sizes = dict(
        passes=passes,
        tokens_per_batch=tokens_per_batch,
        max_sentence_length=max_sentence_length,
        boundaries=boundaries,
    )
    first, offset = _start(parts, tokenizer, skip, sizes) if skip else (0, 0)

    def segment(part: CorpusPart, seed_of_segment):
        examples, _ = prepare_examples(
            part.pairs,
            tokenizer,
            max_sentence_length,
            shuffle=True,
            shuffle_buffer=shuffle_buffer,
            seed=seed_of_segment,
            deterministic=True,
            repeat=passes,
            cache=False,
        )
        return bucket_batches(examples, tokens_per_batch, max_sentence_length, boundaries)

    later_start = max(first, 1)

    def later_pass(pass_index):
        # tf.data joins an op's seed with the graph-level (global) seed, and fails on a tensor
        # op seed when the global seed is 0: this function's graph is cleared of it, so the
        # order of segments 1, 2, ... comes from (seed, segment) alone.
        tf.compat.v1.get_default_graph().seed = None
        batches = None
        for j, part in enumerate(parts):
            index = pass_index * len(parts) + j
            # the segments before the start (of the pass it begins in) are not read
            one = segment(part, segment_seed(seed, index)).take(
                tf.where(index >= later_start, tf.constant(-1, tf.int64), 0)
            )
            batches = one if batches is None else batches.concatenate(one)
        return batches

    later = tf.data.Dataset.range(later_start // len(parts), _LAST_SEGMENT).flat_map(later_pass)
    # Segment 0 is shuffled as make_dataset(repeat=True) shuffles (its seed joined with the
    # global seed, as Dataset.shuffle does): with one part, a run shorter than a segment trains
    # on the batches it trained on before segments, and one resumed across the change goes on
    # exactly.
    batches = segment(parts[0], seed).concatenate(later) if first == 0 else later
    if offset:
        batches = batches.skip(offset)
    return to_model_batches(batches, deterministic=True)


def _as_parts(pairs, corpus_pairs, kept_by_length) -> list[CorpusPart]:
    if isinstance(pairs, tf.data.Dataset):
        if corpus_pairs is None:
            raise ValueError("corpus_pairs: the number of pairs in the corpus is needed")
        parts = [CorpusPart(pairs, corpus_pairs, kept_by_length)]
    else:
        parts = list(pairs)
    if not parts:
        raise ValueError("the corpus has no part")
    for i, part in enumerate(parts):
        if part.kept_by_length is not None and sum(part.kept_by_length) != part.count:
            raise ValueError(
                f"part {i}: kept_by_length counts {sum(part.kept_by_length)} pairs, its count "
                f"is {part.count}"
            )
    return parts


def _start(parts, tokenizer, skip: int, sizes: dict) -> tuple[int, int]:
    """``(segment, batches to skip in it)`` of batch ``skip``."""
    counts = []
    for part in parts:
        if part.kept_by_length is not None:
            counts.append(batches_by_length(part.kept_by_length, **sizes))
        else:  # read (with one part only as far as shows that the segment is longer than skip)
            more_than = skip if len(parts) == 1 else None
            counts.append(segment_batches(part.pairs, tokenizer, more_than=more_than, **sizes))
    per_pass = sum(counts)
    if per_pass == 0:
        raise ValueError("the corpus has no pair that fits max_sentence_length")
    pass_index, offset = divmod(skip, per_pass)
    for j, count in enumerate(counts):
        if offset < count:
            return pass_index * len(parts) + j, offset
        offset -= count
    raise AssertionError("unreachable: offset < per_pass")


def mixture_stream(
    sample_pairs,
    tokenizer=None,
    *,
    tokens_per_batch: int = 4096,
    max_sentence_length: int = 256,
    seed: int = 0,
    shuffle_buffer: int = 16384,
    skip: int = 0,
    batches_per_segment: int = MIXTURE_SEGMENT_BATCHES,
    boundaries: Sequence[int] | None = None,
) -> tf.data.Dataset:
    """The endless stream of model batches of a mixture of corpora from batch ``skip`` on.

    ``sample_pairs(seed)``: the endless, seeded draw of pairs from the corpora (``data.mix``),
    where ``seed`` is a Python int or an int64 tensor. A mixture has no passes to count, so its
    segments are ``batches_per_segment`` batches each: segment ``k`` draws afresh, shuffled and
    sampled with ``segment_seed(seed, k)``, and drops what is left in its buckets at its end.
    A start at batch ``b`` reads segment ``b // n`` from its start, none before it. Segment 0 is
    ``make_dataset(sample_pairs(seed), shuffle=True, seed=seed, repeat=True)``'s first ``n``
    batches: a run that stays in it trains on the batches it did before segments.
    """
    check_budget(tokens_per_batch, max_sentence_length)
    first, offset = divmod(skip, batches_per_segment)

    def segment(seed_of_segment):
        examples, _ = prepare_examples(
            sample_pairs(seed_of_segment),
            tokenizer,
            max_sentence_length,
            shuffle=True,
            shuffle_buffer=shuffle_buffer,
            seed=seed_of_segment,
            deterministic=True,
            repeat=True,
            cache=False,
        )
        batches = bucket_batches(examples, tokens_per_batch, max_sentence_length, boundaries)
        return batches.take(batches_per_segment)

    def later_segment(index):
        tf.compat.v1.get_default_graph().seed = None  # as in training_stream's later_pass
        return segment(segment_seed(seed, index))

    later = tf.data.Dataset.range(max(first, 1), _LAST_SEGMENT).flat_map(later_segment)
    batches = segment(seed).concatenate(later) if first == 0 else later
    if offset:
        batches = batches.skip(offset)
    return to_model_batches(batches, deterministic=True)
