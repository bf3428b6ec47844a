"""Equation (1) of section 3.2.1, scaled dot-product attention, and the decoder's causal mask
(section 3.2.3): the functions :class:`~keras_transformer.layers.MultiHeadAttention` runs per
head."""

from keras import ops

from keras_transformer.layers.masking import MASK_VALUE


def attention(query, key, value, mask=None, dropout=None, training=None, fast=False):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, equation (1) of section 3.2.1.

    Args:
        query: ``[batch, heads, q_len, d_k]``.
        key: ``[batch, heads, k_len, d_k]``.
        value: ``[batch, heads, k_len, d_v]``.
        mask: optional boolean, broadcastable to ``[batch, heads, q_len, k_len]``; True = attend.
        dropout: optional dropout layer applied to the attention weights (section 5.4).
        fast: add the mask as a ``0 / -1e9`` bias instead of selecting with ``where`` (same
            weights: ``exp(-1e9 - max)`` is exactly 0 in float32).

    Returns:
        ``(output [batch, heads, q_len, d_v], weights [batch, heads, q_len, k_len])``; the weights
        are float32 and exactly zero where the mask is False.
    """
    d_k = ops.shape(query)[-1]
    scale = ops.cast(1.0 / ops.sqrt(ops.cast(d_k, "float32")), query.dtype)
    # Q K^T / sqrt(d_k); the softmax runs in float32 even under a mixed-precision policy.
    scores = ops.cast(ops.einsum("bhqd,bhkd->bhqk", query * scale, key), "float32")
    if mask is not None and fast:
        scores = scores + ops.where(mask, 0.0, MASK_VALUE)  # one add of a [b, 1, q, k] bias
    elif mask is not None:
        scores = ops.where(mask, scores, MASK_VALUE)
    weights = ops.softmax(scores, axis=-1)
    attended = weights if dropout is None else dropout(weights, training=training)
    return ops.matmul(ops.cast(attended, value.dtype), value), weights


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None, training=None):
    """Equation (1) on ``[batch, length, heads, d]`` tensors (Keras' layout); see :func:`attention`.

    Returns ``(output [batch, q_len, heads, d_v], weights [batch, heads, q_len, k_len])``.
    """
    heads_first = lambda x: ops.transpose(x, (0, 2, 1, 3))
    output, weights = attention(
        heads_first(query), heads_first(key), heads_first(value), mask, dropout, training
    )
    return heads_first(output), weights


def causal_mask(query_length, key_length, offset=0):
    """Boolean ``[q_len, k_len]`` mask, True where key position <= query position (section 3.2.3).

    ``offset`` is the position of the first query, for decoding step by step with a cache.
    """
    query_positions = ops.arange(query_length, dtype="int32") + ops.cast(offset, "int32")
    key_positions = ops.arange(key_length, dtype="int32")
    return ops.expand_dims(query_positions, 1) >= ops.expand_dims(key_positions, 0)
