"""A search over a large batch in sub-batches under a token budget (bounded serving memory).

The search's memory grows with rows x beam x length (encoder memory, the cross-attention
keys/values of every layer, the self-attention caches), so one request of 10,000 sentences
would hold all of them at once. :func:`search_in_sub_batches` sorts the rows by source length,
cuts them into sub-batches of at most ``max_batch_tokens`` source ids (rows x padded width of the
request, at least one row), runs ``search`` on each (its padding columns dropped) in a
``tf.while_loop`` and scatters the results back into request order. Each sentence's result never
depends on the others of its batch, so the outputs equal one search over the whole batch.
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.decoding.search import trim_padding
from keras_transformer.tokenization import PAD_ID

__all__ = ["search_in_sub_batches"]


def search_in_sub_batches(search, source_ids, max_batch_tokens: int, max_extra_length: int):
    """``search(source [n, S]) -> (ids [n, T], scores [n])`` over ``source_ids`` ``[B, S]`` in
    sub-batches of at most ``max_batch_tokens`` source ids; returns ``(ids [B, T], scores [B])``
    as one ``search`` of the whole batch would (``T <= S + max_extra_length``)."""
    batch, width = tf.shape(source_ids)[0], tf.shape(source_ids)[1]
    rows = tf.maximum(1, max_batch_tokens // tf.maximum(width, 1))
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID), tf.int32), axis=1)
    order = tf.argsort(lengths, stable=True)  # similar lengths together: less padding
    ordered = tf.gather(source_ids, order)
    out_width = width + max_extra_length

    def body(start, ids, scores):
        index = order[start : start + rows][:, None]
        chunk_ids, chunk_scores = search(trim_padding(ordered[start : start + rows]))
        chunk_ids = tf.pad(chunk_ids, [[0, 0], [0, out_width - tf.shape(chunk_ids)[1]]])
        ids = tf.tensor_scatter_nd_update(ids, index, chunk_ids)
        return start + rows, ids, tf.tensor_scatter_nd_update(scores, index, chunk_scores)

    start = (tf.constant(0), tf.zeros([batch, out_width], tf.int32), tf.zeros([batch]))
    _, ids, scores = tf.while_loop(lambda i, *_: i < batch, body, start)
    return trim_padding(ids), scores
