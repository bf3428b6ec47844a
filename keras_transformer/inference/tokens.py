"""The k most probable next tokens of each row (section 3.4's softmax output), never banned ids.

Plain: ``log_softmax`` over the vocabulary, banned ids set to -inf, ``top_k``. Fast (the
default of :class:`~keras_transformer.Searcher`): the same ids and log-probabilities
from a top-k over blocks of about sqrt(V) ids (``tests/test_decoding.py`` checks both agree;
timings in ``results/benchmarks.md``).
"""

import tensorflow as tf

NEG_INF = float("-inf")


def best_tokens_plain(logits, k, banned_ids):
    """``(log_probs [N, k], ids [N, k])``, sorted: the ``k`` most probable ids per row of
    ``logits`` ``[N, vocab]``, log-probabilities from a softmax over the whole vocabulary."""
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    vocab = tf.shape(log_probs)[1]
    banned = tf.reduce_any(
        tf.equal(tf.range(vocab)[:, None], tf.constant(list(banned_ids), tf.int32)[None]), axis=1
    )
    values, ids = tf.math.top_k(tf.where(banned[None], NEG_INF, log_probs), k)
    return values, ids


def block_size(vocab_size):
    """Block width for :func:`best_tokens_blocked`: a divisor of the vocabulary size near its
    square root if there is one (no padding), else the square root."""
    root = max(1, int(round(vocab_size**0.5)))
    for offset in range(root // 2):
        for size in (root - offset, root + offset):
            if 1 < size <= vocab_size and vocab_size % size == 0:
                return size
    return root


def best_tokens_blocked(logits, k, banned_ids, vocab_size, block):
    """:func:`best_tokens_plain` without a top-k over the whole vocabulary.

    The vocabulary is cut into blocks of ``block`` ids; the best ``m = k + len(banned)`` ids lie
    in the ``m`` blocks with the highest maxima, so ``top_k`` runs on those blocks only; banned
    ids are dropped from that short list. The log-normalizer (``logsumexp``) takes one more pass.
    """
    logits = tf.cast(logits, tf.float32)
    num_blocks = -(-vocab_size // block)
    padded = logits
    if num_blocks * block != vocab_size:
        padded = tf.pad(
            logits, [[0, 0], [0, num_blocks * block - vocab_size]], constant_values=NEG_INF
        )
    blocks = tf.reshape(padded, [-1, num_blocks, block])
    block_max = tf.reduce_max(blocks, axis=2)  # [N, num_blocks]
    row_max = tf.reduce_max(block_max, axis=1, keepdims=True)  # [N, 1]
    log_normalizer = row_max + tf.math.log(
        tf.reduce_sum(tf.exp(logits - row_max), axis=1, keepdims=True)
    )
    _, top_blocks = tf.math.top_k(block_max, min(k + len(banned_ids), num_blocks))
    values = tf.reshape(
        tf.gather(blocks, top_blocks, axis=1, batch_dims=1), [tf.shape(logits)[0], -1]
    )
    ids = tf.reshape(top_blocks[:, :, None] * block + tf.range(block)[None, None], tf.shape(values))
    excluded = ids >= vocab_size  # padding
    for banned in banned_ids:
        excluded |= tf.equal(ids, banned)
    values, position = tf.math.top_k(tf.where(excluded, NEG_INF, values), k)
    return values - log_normalizer, tf.gather(ids, position, batch_dims=1)


def repeated_ngram_mask(history, step, n, vocab_size):
    """bool ``[R, vocab]``: the ids that would repeat an ``n``-gram of each row's ``history``.

    ``history`` int32 ``[R, L]`` holds the ids emitted so far (positions ``< step``); the id at
    ``step`` would end the n-gram whose first ``n - 1`` ids are ``history[:, step - n + 1 :
    step]``, so every id that followed those ``n - 1`` ids earlier in the row is banned (for
    ``n = 1``, every id emitted so far). fairseq's and CTranslate2's ``no_repeat_ngram_size``.
    Static shapes only (XLA compiles it): one scatter over the ``R x L`` earlier n-grams.
    """
    rows, length = tf.shape(history)[0], tf.shape(history)[1]
    starts = tf.range(length)  # j: the earlier n-gram history[:, j : j + n]

    def shifted(offset):  # history[:, j + offset] for every j (0 past the end)
        return tf.pad(history, [[0, 0], [0, offset]])[:, offset : offset + length]

    match = tf.broadcast_to((starts <= step - n)[None], [rows, length])
    for offset in range(n - 1):
        current = tf.gather(history, tf.maximum(step - n + 1 + offset, 0), axis=1)  # [R]
        match &= tf.equal(shifted(offset), current[:, None])
    row_index = tf.broadcast_to(tf.range(rows)[:, None], [rows, length])
    index = tf.stack([row_index, shifted(n - 1)], axis=-1)
    counts = tf.scatter_nd(index, tf.cast(match, tf.int32), [rows, vocab_size])
    return counts > 0


def best_tokens_allowed(best_tokens, logits, k, banned):
    """``best_tokens(logits, k)`` over the ids not ``banned`` (bool ``[N, vocab]``), with the
    log-probabilities of the model's softmax over the whole vocabulary: a banned id is removed,
    the others keep their probabilities (as fairseq and CTranslate2 apply
    ``no_repeat_ngram_size``)."""
    logits = tf.cast(logits, tf.float32)
    allowed = tf.where(banned, NEG_INF, logits)
    values, ids = best_tokens(allowed, k)
    # best_tokens normalized over the allowed ids: back to the whole vocabulary's normalizer.
    shift = tf.reduce_logsumexp(allowed, axis=1, keepdims=True) - tf.reduce_logsumexp(
        logits, axis=1, keepdims=True
    )
    return values + shift, ids
