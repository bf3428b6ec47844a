"""The endless training stream in segments: a start at batch b gives the batches the stream from 0
gives from b, reads only the segment that holds b, and counts a segment's batches exactly."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.data import buckets, segments

PAIRS = 120
SETTINGS = dict(tokens_per_batch=64, max_sentence_length=16, shuffle_buffer=50, seed=3)


def _corpus(reads=None):
    """120 id pairs of lengths 1..15 (a few too long or empty: dropped), as a shard reader gives
    them; ``reads`` (a variable) counts the pairs read."""
    rng = np.random.default_rng(0)
    sources = [rng.integers(4, 50, rng.integers(0, 17)).tolist() for _ in range(PAIRS)]
    targets = [rng.integers(4, 50, rng.integers(1, 17)).tolist() for _ in range(PAIRS)]
    pairs = tf.data.Dataset.from_tensor_slices(
        (tf.ragged.constant(sources, tf.int32), tf.ragged.constant(targets, tf.int32))
    )
    if reads is None:
        return pairs

    def counted(source, target):
        with tf.control_dependencies([reads.assign_add(1)]):
            return tf.identity(source), tf.identity(target)

    return pairs.map(counted)


def _stream(pairs, skip=0, segment_pairs=250):
    return segments.training_stream(
        pairs, corpus_pairs=PAIRS, skip=skip, segment_pairs=segment_pairs, **SETTINGS
    )


def _labels(dataset, count):
    return [labels.numpy() for _, labels in dataset.take(count)]


def _segment_length():
    return segments.segment_batches(
        _corpus(),
        passes=segments.passes_per_segment(PAIRS, 250),
        tokens_per_batch=SETTINGS["tokens_per_batch"],
        max_sentence_length=SETTINGS["max_sentence_length"],
    )


def test_a_segment_holds_the_batches_its_count_says():
    passes = segments.passes_per_segment(PAIRS, 250)
    assert passes == 3  # 120 pairs a pass, at least 250 a segment
    examples, _ = buckets.prepare_examples(
        _corpus(), None, 16, shuffle=True, shuffle_buffer=50, seed=9, deterministic=True,
        repeat=passes, cache=False,
    )  # fmt: skip
    counted = sum(1 for _ in buckets.bucket_batches(examples, 64, 16))
    assert _segment_length() == counted > 0
    # the stream's first segment ends where its count says: the next batch starts segment 1
    whole = _labels(_stream(_corpus()), counted + 1)
    first_of_segment_1 = _labels(_stream(_corpus(), skip=counted), 1)[0]
    np.testing.assert_array_equal(whole[counted], first_of_segment_1)


@pytest.mark.parametrize("where", ["segment 0", "last of segment 0", "segment 1", "segment 3"])
def test_a_stream_started_at_batch_b_gives_the_batches_from_b(where):
    per_segment = _segment_length()
    skip = {
        "segment 0": 5,
        "last of segment 0": per_segment - 1,
        "segment 1": per_segment + 2,
        "segment 3": 3 * per_segment + 7,
    }[where]
    whole = _labels(_stream(_corpus()), skip + 6)
    started = _labels(_stream(_corpus(), skip=skip), 6)
    assert len(started) == 6
    for expected, got in zip(whole[skip:], started, strict=True):
        np.testing.assert_array_equal(expected, got)


def test_a_start_in_segment_k_reads_no_segment_before_it():
    per_segment = _segment_length()
    passes = segments.passes_per_segment(PAIRS, 250)
    reads = tf.Variable(0, dtype=tf.int64)
    skip = 20 * per_segment + per_segment // 2
    _labels(_stream(_corpus(reads), skip=skip), 1)
    # at most: a pass to count the segment's batches, the segment up to its middle batch, and
    # what the pipeline reads ahead; a replay from batch 0 would read 20 segments
    assert int(reads.numpy()) <= PAIRS * (1 + passes + 1)


def test_segment_0_is_the_stream_of_make_dataset_and_later_ones_the_data_seed_alone():
    """Runs shorter than a segment train on the batches they did before segments; the later
    segments' order does not depend on the global seed (keras.utils.set_random_seed)."""
    per_segment = _segment_length()
    keras.utils.set_random_seed(0)
    plain = buckets.make_dataset(_corpus(), None, repeat=True, **SETTINGS)
    within = per_segment - 20  # the last batches of a segment are its flushed partial ones
    for expected, got in zip(_labels(plain, within), _labels(_stream(_corpus()), within)):
        np.testing.assert_array_equal(expected, got)
    later = per_segment + 7
    with_zero = _labels(_stream(_corpus(), skip=later), 4)
    keras.utils.set_random_seed(12345)
    with_other = _labels(_stream(_corpus(), skip=later), 4)
    for a, b in zip(with_zero, with_other, strict=True):
        np.testing.assert_array_equal(a, b)
    other_seed = segments.training_stream(
        _corpus(), corpus_pairs=PAIRS, skip=later, segment_pairs=250, **{**SETTINGS, "seed": 4}
    )
    assert any(
        a.shape != b.shape or (a != b).any()
        for a, b in zip(with_zero, _labels(other_seed, 4), strict=True)
    )


def test_segments_shuffle_differently():
    per_segment = _segment_length()
    first = _labels(_stream(_corpus()), 8)
    second = _labels(_stream(_corpus(), skip=per_segment), 8)
    assert any(a.shape != b.shape or (a != b).any() for a, b in zip(first, second, strict=True))


def _kept_by_length(pairs):
    """What a prepared folder's manifest holds: kept pairs (no side empty) by the positions of
    their longer side with its EOS, counted here in Python from the pairs themselves."""
    counts = [0] * 20
    for source, target in pairs.as_numpy_iterator():
        if len(source) and len(target):
            counts[max(len(source), len(target)) + 1] += 1
    return counts


@pytest.mark.parametrize(
    "max_sentence_length, boundaries", [(16, None), (10, None), (16, [3, 5, 9, 12])]
)
def test_a_segment_counted_from_the_manifests_lengths_equals_the_count_from_reading(
    max_sentence_length, boundaries
):
    sizes = dict(
        passes=3,
        tokens_per_batch=64,
        max_sentence_length=max_sentence_length,
        boundaries=boundaries,
    )
    kept_by_length = _kept_by_length(_corpus())
    assert sum(kept_by_length[max_sentence_length + 1 :]) > 0  # pairs the training drops
    read = segments.segment_batches(_corpus(), **sizes)
    assert segments.batches_by_length(kept_by_length, **sizes) == read > 0


def test_a_start_from_the_manifests_lengths_reads_no_pass_to_count():
    kept_by_length = _kept_by_length(_corpus())
    kept = sum(kept_by_length)
    passes = segments.passes_per_segment(kept, 250)
    stream = dict(corpus_pairs=kept, segment_pairs=250, **SETTINGS)
    per_segment = segments.segment_batches(
        _corpus(), passes=passes, tokens_per_batch=64, max_sentence_length=16
    )
    skip = 20 * per_segment + 3
    reads, labels = {}, {}
    for name, lengths in (("from lengths", kept_by_length), ("counted", None)):
        counter = tf.Variable(0, dtype=tf.int64)
        started = segments.training_stream(
            _corpus(counter), skip=skip, kept_by_length=lengths, **stream
        )
        labels[name] = _labels(started, 4)
        reads[name] = int(counter.numpy())
    for expected, got in zip(labels["counted"], labels["from lengths"], strict=True):
        np.testing.assert_array_equal(expected, got)
    # the same batches, and one pass over the corpus fewer read: no counting pass
    assert reads["from lengths"] <= reads["counted"] - PAIRS
    with pytest.raises(ValueError, match="kept_by_length counts"):
        segments.training_stream(
            _corpus(), skip=skip, kept_by_length=kept_by_length, **{**stream, "corpus_pairs": 1}
        )


def _parts(reads=None, with_lengths=True):
    """The 120-pair corpus in 3 parts of 40 (as groups of shards are); ``reads``: a variable a
    part that counts the pairs read from it."""
    parts = []
    for j in range(3):
        pairs = _corpus().skip(40 * j).take(40)
        lengths = _kept_by_length(pairs)
        if reads is not None:

            def counted(source, target, counter=reads[j]):
                with tf.control_dependencies([counter.assign_add(1)]):
                    return tf.identity(source), tf.identity(target)

            pairs = pairs.map(counted)
        parts.append(segments.CorpusPart(pairs, sum(lengths), lengths if with_lengths else None))
    return parts


def _parts_stream(parts, skip=0):
    return segments.training_stream(parts, skip=skip, segment_pairs=250, **SETTINGS)


def test_shards_group_into_parts_of_about_a_segment():
    assert segments.group_shards([195_652] * 23) == [
        list(range(0, 6)), list(range(6, 12)), list(range(12, 18)), list(range(18, 23))
    ]  # fmt: skip
    assert segments.group_shards([29_000]) == [[0]]
    assert segments.group_shards([600_000, 600_000, 500_000]) == [[0, 1, 2]]  # < 2 segments
    assert segments.group_shards([4_000_000, 10, 10]) == [[0], [1, 2]]


@pytest.mark.parametrize("with_lengths", [True, False])
def test_a_stream_of_parts_started_at_batch_b_gives_the_batches_from_b(with_lengths):
    per_part = [
        segments.batches_by_length(
            part.kept_by_length, passes=1, tokens_per_batch=64, max_sentence_length=16
        )
        for part in _parts()
    ]
    per_pass = sum(per_part)
    starts = {
        "part 1 of pass 0": per_part[0] + 2,
        "part 0 of pass 2": 2 * per_pass + 1,
        "part 2 of pass 3": 3 * per_pass + per_part[0] + per_part[1] + 3,
    }
    whole = _labels(_parts_stream(_parts()), max(starts.values()) + 4)
    for where, skip in starts.items():
        reads = [tf.Variable(0, dtype=tf.int64) for _ in range(3)]
        started = _labels(_parts_stream(_parts(reads, with_lengths), skip=skip), 4)
        for expected, got in zip(whole[skip : skip + 4], started, strict=True):
            np.testing.assert_array_equal(expected, got, err_msg=where)
        if with_lengths:  # the part before the start's is not read (the next may be, ahead)
            before = {"part 1 of pass 0": 0, "part 0 of pass 2": 2, "part 2 of pass 3": 1}[where]
            assert int(reads[before].numpy()) == 0, where
    # segment 0 is part 0 alone, once: its batches hold part 0's pairs that fit 16 positions
    first_part = _labels(_parts_stream(_parts()), per_part[0])
    assert sum(len(b) for b in first_part) == sum(_parts()[0].kept_by_length[:17])
