"""Batching for inference, in one place: a request cut into length-sorted batches.

* :func:`search_in_sub_batches` (graph): inside an export, a request's search in sub-batches
  under a token budget (bounded serving memory) for every signature;
* :func:`length_sorted_batches` (Python): the lines a translator hands to its engine, sorted by
  length into batches of at most ``batch_size`` rows and ``max_batch_tokens`` ids;
* :func:`map_batches` (Python): those batches one after another, or several at once.

The search's memory grows with rows x beam x length (encoder memory, the cross-attention
keys/values of every layer, the self-attention caches), so one request of 10,000 sentences
would hold all of them at once. :func:`search_in_sub_batches` sorts the rows by source length,
cuts them into sub-batches of at most ``max_batch_tokens`` source ids (rows x padded width of the
request, at least one row), runs ``search`` on each (its padding columns dropped) in a
``tf.while_loop`` and scatters the results back into request order. Each sentence's result never
depends on the others of its batch, so the outputs equal one search over the whole batch.

Both engines run a batch outside Python's GIL (TensorFlow's executor, CTranslate2's workers), so
:func:`map_batches`' ``parallel`` Python threads keep that many batches in flight: CTranslate2's
``inter_threads``, and for the SavedModel as many concurrent signature calls.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from keras_transformer.text.tokenizer import PAD_ID

__all__ = ["length_sorted_batches", "map_batches", "search_in_sub_batches"]


def search_in_sub_batches(
    search, source_ids, max_batch_tokens: int, max_extra_length: int, row_inputs=()
):
    """``search(source [n, S], *rows [n]) -> outputs`` over ``source_ids`` ``[B, S]`` in
    sub-batches of at most ``max_batch_tokens`` source ids; returns the outputs one ``search``
    of the whole batch would give. ``row_inputs`` are more ``[B]`` inputs, one per source row
    (a sampled search's seeds and settings), cut into the same sub-batches.

    ``outputs`` is a tuple whose first item is the ids ``[n, ..., T]`` (``T <= S +
    max_extra_length``, 0-padded); each other item is either ``[n, ...]`` of the ids' rank less
    one (scores) or ``[n, ..., T]`` along the ids' last axis (an alignment, -1-padded).
    """
    import tensorflow as tf

    from keras_transformer.inference.search import trim_padding

    batch, width = tf.shape(source_ids)[0], tf.shape(source_ids)[1]
    rows = tf.maximum(1, max_batch_tokens // tf.maximum(width, 1))
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(source_ids, PAD_ID), tf.int32), axis=1)
    order = tf.argsort(lengths, stable=True)  # similar lengths together: less padding
    ordered = tf.gather(source_ids, order)
    ordered_rows = [tf.gather(values, order) for values in row_inputs]
    out_width = width + max_extra_length

    def run(start):
        """The search of the sub-batch at ``start``, each output along the ids' last axis
        padded to the request's width."""
        sub_batch = [values[start : start + rows] for values in ordered_rows]
        outputs = search(trim_padding(ordered[start : start + rows]), *sub_batch)
        rank = outputs[0].shape.rank
        padded = []
        for position, output in enumerate(outputs):
            if output.shape.rank == rank:
                pad = [[0, 0]] * (rank - 1) + [[0, out_width - tf.shape(output)[-1]]]
                output = tf.pad(output, pad, constant_values=PAD_ID if position == 0 else -1)
            padded.append(output)
        return tuple(padded)

    def scatter(start, results, outputs):
        index = order[start : start + rows][:, None]
        return tuple(tf.tensor_scatter_nd_update(r, index, o) for r, o in zip(results, outputs))

    # The first sub-batch outside the loop: its outputs give the buffers' types and shapes.
    first = run(0)
    buffers = tuple(
        tf.zeros(tf.concat([[batch], tf.shape(o)[1:]], 0), o.dtype) + tf.cast(pad, o.dtype)
        for o, pad in zip(first, [PAD_ID] + [-1 if o.dtype.is_integer else 0 for o in first[1:]])
    )
    results = scatter(0, buffers, first)
    # One sub-batch at a time: by default a while loop may run up to 10 iterations at once, and
    # each sub-batch's search depends only on the loop counter, so the bound would not hold.
    _, results = tf.while_loop(
        lambda start, _: start < batch,
        lambda start, results: (start + rows, scatter(start, results, run(start))),
        (rows, results),
        parallel_iterations=1,
    )
    ids = trim_padding(results[0])
    rank, kept = ids.shape.rank, tf.shape(ids)[-1]
    return (ids, *[r[..., :kept] if r.shape.rank == rank else r for r in results[1:]])


def length_sorted_batches(
    lengths: Sequence[int], batch_size: int, max_batch_tokens: int | None = None
) -> list[list[int]]:
    """Indices of the items of ``lengths``, shortest first, cut into batches of at most
    ``batch_size`` items and ``max_batch_tokens`` ids (items x the longest; at least one item
    a batch). Items of length 0 are left out (nothing to translate).

    >>> length_sorted_batches([3, 1, 0, 2, 5], batch_size=2)
    [[1, 3], [0, 4]]
    >>> length_sorted_batches([3, 1, 2, 5], batch_size=8, max_batch_tokens=6)
    [[1, 2], [0], [3]]
    """
    batches = [[]]
    for i in np.argsort(np.asarray(lengths, np.int64), kind="stable"):
        if lengths[i] == 0:
            continue
        rows, width = len(batches[-1]) + 1, lengths[i]  # sorted: the longest so far
        if rows > batch_size or (max_batch_tokens and rows > 1 and rows * width > max_batch_tokens):
            batches.append([])
        batches[-1].append(int(i))
    return [batch for batch in batches if batch]


def map_batches(
    run: Callable, chunks: Sequence, parallel: int = 1, progress: bool = False
) -> Iterator:
    """``(chunk, run(chunk))`` for every chunk, in order; ``parallel`` chunks at once."""
    pool = ThreadPoolExecutor(parallel, thread_name_prefix="translate") if parallel > 1 else None
    results = (pool.map if pool else map)(lambda chunk: (chunk, run(chunk)), chunks)
    if progress:
        from tqdm import tqdm

        results = tqdm(results, "translating", len(chunks), unit="batch", file=sys.stderr)
    try:
        yield from results
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
