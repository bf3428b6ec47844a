"""Finished sentences leave the search's batch: the helpers of ``Searcher(drop_finished=True)``.

The decoder's batch then holds only the sentences whose result can still change (and finished
ones until they are ``DROP_SHARE`` of it): their results are written into the buffers of the
whole batch, and their rows leave the strategy's state (sentence rows) and the cache (``width``
rows per sentence, the cross-attention keys/values and source mask too). The loop is
``Searcher._search_dropping_finished``.
"""

import tensorflow as tf


def write(buffers, rows, values):
    """The result ``buffers`` of the whole batch with ``values`` written at batch ``rows``."""
    return tf.nest.map_structure(
        lambda buffer, value: tf.tensor_scatter_nd_update(buffer, rows[:, None], value),
        buffers,
        values,
    )


# Finished sentences leave once they are at least this share of the batch left (or all of it):
# each drop copies the cache rows kept, and the strategies leave finished sentences unchanged.
DROP_SHARE = 1 / 8


def drop_finished(strategy, parents, width, active, state, caches, results, shared_cross=False):
    """One step's ``(active, state, caches, results)`` (``caches``: a decoder cache per model of
    an ensemble) after the sentences that ``strategy``
    says are finished leave (when they are ``DROP_SHARE`` of the sentences left): their results
    are written, the others' state and cache rows are kept (the self-attention rows continuing
    ``parents``, as in the plain loop; the cross-attention rows of the sentences kept, one per
    sentence with ``shared_cross``, else ``width``)."""
    finished = strategy.finished(state)
    count = tf.reduce_sum(tf.cast(finished, tf.int32))
    share = tf.cast(count, tf.float32) >= DROP_SHARE * tf.cast(tf.size(active), tf.float32)

    def drop():
        keep = tf.cast(tf.reshape(tf.where(tf.logical_not(finished)), [-1]), tf.int32)
        rows = tf.reshape(keep[:, None] * width + tf.range(width)[None], [-1])
        self_rows = rows if parents is None else tf.gather(parents, rows)
        cross_rows = keep if shared_cross else rows
        kept = tuple(
            cache._replace(
                self_attention=gather_rows(cache.self_attention, self_rows),
                cross_attention=gather_rows(cache.cross_attention, cross_rows),
                source_mask=tf.gather(cache.source_mask, cross_rows),
            )
            for cache in caches
        )
        written = write(
            results,
            tf.boolean_mask(active, finished),
            tf.nest.map_structure(lambda r: tf.boolean_mask(r, finished), strategy.result(state)),
        )
        return tf.gather(active, keep), gather_rows(state, keep), kept, written

    def continue_all():
        if parents is None:
            return active, state, caches, results
        # Beam search: rows continue other rows' hypotheses.
        continued = tuple(
            cache._replace(self_attention=gather_rows(cache.self_attention, parents))
            for cache in caches
        )
        return active, state, continued, results

    return tf.cond((count > 0) & share, drop, continue_all)


def gather_rows(structure, rows):
    """Every tensor of ``structure`` gathered along its first axis."""
    return tf.nest.map_structure(lambda t: tf.gather(t, rows), structure)
