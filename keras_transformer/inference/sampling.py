"""Random sampling for the search: top-k, top-p (nucleus) and temperature, seeded per sentence.

Back-translation (Edunov et al. 2018, "Understanding Back-Translation at Scale") makes synthetic
sources by sampling the reverse model rather than taking its beam output. At each step a row's
next id is drawn from the model's distribution ``softmax(log_probs / temperature)`` restricted
to its ``topk`` most probable ids (0: all of them) and then to the smallest set of those whose
probability reaches ``topp`` (the most probable id always stays). ``topk = 1`` is greedy search.

The draw is the Gumbel-max trick: ``argmax(log_probs / temperature + g)`` over the kept ids,
with ``g = -log(-log(u))`` and ``u`` a hash of (the row's seed, the step, the id). So a
sentence's sample depends only on its seed, its source and the settings, never on the other
sentences of its batch, the sub-batches of a request, the thread count or the process: the same
seed gives the same output (``tests/test_sampling.py``). Seeds are int64, one per row;
:func:`sentence_seeds` derives them from one user seed, a line number and a sample number.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_transformer.inference.tokens import NEG_INF
from keras_transformer.text.vocabulary import PAD_ID

__all__ = ["sample_tokens", "sentence_seeds", "source_seeds"]

_MASK32 = 0xFFFFFFFF
_MULTIPLIER = 0x45D9F3B  # a 32-bit integer hash's multiplier (small: int64 products never wrap)


_xor, _and, _shift = tf.bitwise.bitwise_xor, tf.bitwise.bitwise_and, tf.bitwise.right_shift


def _mix(x):
    """A 32-bit integer hash of int64 ``x`` (xor-shift-multiply, twice); ``[0, 2**32)``."""
    x = _and(x, _MASK32)
    for _ in range(2):
        x = _and(_xor(_shift(x, 16), x) * _MULTIPLIER, _MASK32)
    return _xor(_shift(x, 16), x)


def _row_keys(seeds):
    """int64 ``[R]`` seeds -> 32-bit keys mixing both halves of each seed."""
    seeds = tf.cast(seeds, tf.int64)
    return _mix(_xor(seeds, _mix(_shift(seeds, 32) + 0x9E3779B9)))


def _gumbel(keys, step, ids):
    """Gumbel noise ``[R, K]`` for ids ``[R, K]`` at ``step`` of rows with ``keys`` ``[R]``."""
    step_key = _mix(tf.cast(step, tf.int64) + 0x7F4A7C15)
    bits = _mix(_xor(_xor(keys[:, None], step_key), _mix(tf.cast(ids, tf.int64))))
    bits = _mix(_xor(bits, keys[:, None]))
    # 23 bits and a half into (0, 1): exact in float32's 24-bit significand, never 0 or 1.
    uniform = (tf.cast(_shift(bits, 9), tf.float32) + 0.5) / float(1 << 23)
    return -tf.math.log(-tf.math.log(uniform))


def sample_tokens(log_probs, seeds, step, topk, topp, temperature):
    """One draw per row: int32 ``[R]`` ids.

    Args:
        log_probs: float32 ``[R, vocab]``, the model's log-probabilities (-inf: never drawn).
        seeds: int64 ``[R]``, each row's seed.
        step: the position being drawn (a scalar).
        topk: int32 ``[R]``, draw among the ``topk`` most probable ids (0: all).
        topp: float32 ``[R]``, then among the fewest of those reaching this probability.
        temperature: float32 ``[R]``, > 0: the distribution is ``softmax(log_probs / t)``.
    """
    vocab = tf.shape(log_probs)[1]
    scaled = log_probs / temperature[:, None]
    topk = tf.where(topk <= 0, vocab, tf.minimum(topk, vocab))
    # The candidates: the largest k of any row, or the whole (sorted) vocabulary for top-p.
    width = tf.where(tf.reduce_any(topp < 1.0), vocab, tf.reduce_max(topk))
    values, ids = tf.math.top_k(scaled, width, sorted=True)  # [R, width]
    rank = tf.range(width)[None]
    keep = (rank < topk[:, None]) & (values > NEG_INF)
    probs = tf.nn.softmax(tf.where(keep, values, NEG_INF), axis=-1)
    before = tf.math.cumsum(probs, axis=-1, exclusive=True)  # mass of the more probable ids
    keep &= (before < topp[:, None]) | tf.equal(rank, 0)
    noisy = tf.where(keep, values + _gumbel(_row_keys(seeds), step, ids), NEG_INF)
    choice = tf.argmax(noisy, axis=-1, output_type=tf.int32)
    return tf.gather(ids, choice, batch_dims=1)


def source_seeds(seed, source_ids):
    """int64 ``[B]`` seeds from one ``seed`` and each row of ``source_ids`` ``[B, S]``: the
    seeds of a search that is given none (the same sentence, the same sample, whatever the
    padding its batch gives it)."""
    ids = tf.RaggedTensor.from_tensor(source_ids, padding=PAD_ID)
    text = tf.strings.reduce_join(tf.strings.as_string(ids), axis=1, separator=" ")
    hashed = tf.strings.to_hash_bucket_fast(text, (1 << 62) - 1)
    return _xor(hashed, tf.constant(int(seed) & ((1 << 62) - 1), tf.int64))


def sentence_seeds(seed: int, lines: int, samples: int = 1) -> np.ndarray:
    """int64 ``[lines * samples]``: the seed of sample ``j`` of line ``i`` at ``i * samples + j``,
    from one user ``seed`` (splitmix64 of the three), so that each line and sample draws apart
    and a file translated again with the same seed gives the same samples."""
    line = np.repeat(np.arange(lines, dtype=np.uint64), samples)
    sample = np.tile(np.arange(samples, dtype=np.uint64), lines)
    with np.errstate(over="ignore"):
        x = np.uint64(int(seed) & (2**64 - 1)) * np.uint64(0x9E3779B97F4A7C15)
        x = x ^ (line * np.uint64(0xBF58476D1CE4E5B9)) ^ (sample * np.uint64(0x94D049BB133111EB))
        for shift, multiplier in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
            x = (x ^ (x >> np.uint64(shift))) * np.uint64(multiplier)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(1)).astype(np.int64)  # non-negative int64
