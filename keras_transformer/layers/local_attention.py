"""Local restricted attention (paper section 4 and conclusion): each query sees only the keys
within distance ``r`` (``window``) of its own position; in the decoder, the ``r`` previous
positions and itself.

Two forms of the same maths, on ``[batch, heads, length, d]`` tensors (self-attention: queries
and keys are the same positions):

* :func:`band_mask`: the reference, a band mask over full attention (equation (1) with more
  masked scores): O(n^2 d) time and O(n^2) memory, like full attention;
* :func:`blocked_attention`: the sequence cut into blocks of ``r`` positions; the queries of a
  block attend to the keys of their block and of the neighbour blocks that cover distance ``r``
  (one before and one after; causal: one before), ``3r`` (causal ``2r``) keys per query: O(n r d).
  A sequence of ``n <= r`` positions is one block of ``n`` (not ``r``): O(n^2 d), as full
  attention, whose keys all lie within the window then.

Both give the same outputs and gradients at every real (non-padding) query position
(``tests/test_restricted_attention.py``); a query whose whole window is padding gets a
meaningless average in both (of different keys), as in full attention.
"""

from typing import Any, NamedTuple

from keras import ops

from keras_transformer.layers.masking import MASK_VALUE


class WindowCache(NamedTuple):
    """The self-attention cache of a decoder with ``attention_window=r``: the last r positions.

    ``keys``, ``values``: ``[batch, heads, r, d_k]`` and ``[batch, heads, r, d_v]``;
    ``positions``: int32 ``[batch, r]``, the position of each slot (-1: empty). Full attention's
    cache is a plain ``(keys, values)`` pair of exactly the earlier positions; the type tells the
    two apart.
    """

    keys: Any
    values: Any
    positions: Any


def band_mask(query_length, key_length, window, causal=False, offset=0):
    """Boolean ``[q_len, k_len]``: True where ``|key - query| <= window`` (and, when ``causal``,
    key <= query); ``offset`` is the position of the first query.

    >>> band_mask(4, 4, 1).numpy().astype(int).tolist()
    [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]]
    >>> band_mask(1, 6, 2, causal=True, offset=4).numpy().astype(int).tolist()
    [[0, 0, 1, 1, 1, 0]]
    """
    query = ops.arange(query_length, dtype="int32") + ops.cast(offset, "int32")
    distance = ops.expand_dims(query, 1) - ops.expand_dims(ops.arange(key_length, dtype="int32"), 0)
    # Section 4: "restricted to a neighborhood of size r in the input sequence".
    return ops.logical_and(distance <= window, distance >= (0 if causal else -window))


def _block_size(length, window):
    """Positions per block: r, or the whole sequence when it is shorter than r (one block)."""
    if isinstance(length, int):
        return max(1, min(length, window))
    return ops.maximum(1, ops.minimum(ops.cast(length, "int32"), window))


def _blocks(x, blocks, size):
    """``[batch, heads, n, d] -> [batch, heads, blocks, size, d]``, zero-padded at the end."""
    batch, heads, length, depth = (ops.shape(x)[i] for i in range(4))
    x = ops.pad(x, [[0, 0], [0, 0], [0, blocks * size - length], [0, 0]])
    return ops.reshape(x, (batch, heads, blocks, size, depth))


def _with_neighbours(blocked, causal):
    """Each block of ``[..., blocks, window, ...]`` (block axis 2) with the block before it and
    (not causal) after it, concatenated along the window axis: ``[..., blocks, 2 or 3 window,
    ...]``; blocks beyond the ends are zeros (their keys are masked)."""
    pads = [[0, 0]] * len(blocked.shape)
    pads[2] = [1, 0 if causal else 1]
    padded = ops.pad(blocked, pads)
    if causal:  # the block before, then the block itself
        return ops.concatenate([padded[:, :, :-1], padded[:, :, 1:]], axis=3)
    return ops.concatenate([padded[:, :, :-2], padded[:, :, 1:-1], padded[:, :, 2:]], axis=3)


def blocked_mask(length, window, key_mask=None, causal=False):
    """Which of each block's ``2b`` / ``3b`` context keys a query may see (b: the block size,
    ``min(n, r)``): ``[batch or 1, 1, blocks, b, context]``."""
    size = _block_size(length, window)
    blocks = (length + size - 1) // size
    context = (2 if causal else 3) * size
    # Query j of block i is at i*b + j; context key c of block i at (i-1)*b + c.
    query = ops.arange(size, dtype="int32")
    key = ops.arange(context, dtype="int32") - size
    distance = query[:, None] - key[None, :]
    band = ops.logical_and(distance <= window, distance >= (0 if causal else -window))
    key_position = ops.arange(blocks, dtype="int32")[:, None] * size + key[None, :]
    inside = ops.logical_and(key_position >= 0, key_position < length)  # [blocks, context]
    mask = ops.logical_and(band[None, None, None], inside[None, None, :, None])
    if key_mask is not None:  # [batch, length] -> [batch, 1, blocks, 1, context]
        keys = _blocks(ops.cast(key_mask, "int32")[:, None, :, None], blocks, size)
        keys = ops.cast(_with_neighbours(keys, causal)[:, :, :, :, 0], "bool")
        mask = ops.logical_and(mask, keys[:, :, :, None, :])
    return mask


def blocked_attention(
    query, key, value, window, key_mask=None, causal=False, dropout=None, training=None, fast=True
):
    """Restricted self-attention in O(n r d): equal to :func:`attention` under
    :func:`band_mask` at every real query position (see the module docstring).

    Args:
        query, key, value: ``[batch, heads, n, d]``, the same n positions.
        window: r, the largest distance between a query and a key it sees.
        key_mask: optional boolean ``[batch, n]``, True at real keys.
        causal: also hide later positions (the decoder's self-attention, section 3.2.3).
        fast: add the mask as a bias instead of selecting with ``where``.

    Returns:
        ``[batch, heads, n, d_v]``.

    >>> import numpy as np
    >>> from keras_transformer.layers.dot_product import attention
    >>> q, k, v = (np.random.default_rng(i).normal(size=(1, 2, 7, 4)) for i in range(3))
    >>> reference = attention(q, k, v, band_mask(7, 7, 3)[None, None])[0]
    >>> bool(np.allclose(blocked_attention(q, k, v, 3), reference, atol=1e-6))
    True
    """
    length = ops.shape(query)[2]
    size = _block_size(length, window)
    blocks = (length + size - 1) // size
    scale = ops.cast(1.0 / ops.sqrt(ops.cast(ops.shape(query)[-1], "float32")), query.dtype)
    q = _blocks(query * scale, blocks, size)
    k = _with_neighbours(_blocks(key, blocks, size), causal)
    v = _with_neighbours(_blocks(value, blocks, size), causal)
    scores = ops.cast(ops.einsum("bhnqd,bhnkd->bhnqk", q, k), "float32")
    mask = blocked_mask(length, window, key_mask, causal)
    if fast:
        scores = scores + ops.where(mask, 0.0, MASK_VALUE)
    else:
        scores = ops.where(mask, scores, MASK_VALUE)
    weights = ops.softmax(scores, axis=-1)
    if dropout is not None:
        weights = dropout(weights, training=training)
    attended = ops.einsum("bhnqk,bhnkd->bhnqd", ops.cast(weights, value.dtype), v)
    batch, heads, depth = ops.shape(value)[0], ops.shape(value)[1], ops.shape(value)[3]
    attended = ops.reshape(attended, (batch, heads, blocks * size, depth))
    return attended[:, :, :length]


def key_mask_of(attention_mask):
    """``[batch, k_len]`` of a mask that is the same for every query (``[batch, 1, k_len]``), or
    None if there is no mask; False if the mask varies with the query (no blocked form then)."""
    if attention_mask is None:
        return None
    mask = ops.cast(attention_mask, "bool")
    if len(mask.shape) != 3 or mask.shape[1] != 1:
        return False
    return mask[:, 0]


def next_position(cache):
    """The position of the next query after a self-attention ``cache`` (either format)."""
    if not isinstance(cache, WindowCache):  # (keys, values) of exactly the earlier positions
        return ops.shape(cache[0])[2]
    last = ops.concatenate([cache.positions[:, -1], -ops.ones((1,), "int32")], axis=0)
    return ops.max(last) + 1  # one after the newest slot


def roll_window(cache, keys, values, offset, window):
    """New positions ``keys``/``values`` ``[batch, heads, new, d]`` at ``offset, offset + 1,
    ...`` after a rolling :class:`WindowCache` of r slots.

    Returns ``(keys, values, mask, cache)``: the cached and new keys/values, the mask of the new
    queries over them (``[batch, 1, new, r + new]``: distance 0 to r, filled slots only) and the
    cache of the last r positions (the same size as before).
    """
    old_keys, old_values, old_positions = cache
    new = ops.shape(keys)[2]
    query = ops.arange(new, dtype="int32") + ops.cast(offset, "int32")
    new_positions = ops.broadcast_to(query[None], (ops.shape(keys)[0], new))
    keys = ops.concatenate([old_keys, ops.cast(keys, old_keys.dtype)], axis=2)
    values = ops.concatenate([old_values, ops.cast(values, old_values.dtype)], axis=2)
    positions = ops.concatenate([old_positions, new_positions], axis=1)
    distance = query[None, :, None] - positions[:, None, :]
    allowed = ops.logical_and(distance >= 0, distance <= window)
    allowed = ops.logical_and(allowed, (positions >= 0)[:, None, :])
    kept = WindowCache(keys[:, :, -window:], values[:, :, -window:], positions[:, -window:])
    return keys, values, allowed[:, None], kept
