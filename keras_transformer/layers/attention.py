"""Scaled dot-product and multi-head attention with masks and a key/value cache (paper section 3.2)."""

import keras
from keras import ops

from keras_transformer.layers.dropout import FastDropout
from keras_transformer.layers.projection import project_rows

# Added to masked scores before the softmax: "-inf" that stays finite in float32, so a row whose
# keys are all masked gives a uniform (not NaN) distribution. Scores are always float32 here.
_MASK_VALUE = -1e9


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None, training=None):
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V, equation (1) of section 3.2.1.

    Args:
        query: ``[batch, q_len, heads, d_k]``.
        key: ``[batch, k_len, heads, d_k]``.
        value: ``[batch, k_len, heads, d_v]``.
        mask: optional boolean, broadcastable to ``[batch, heads, q_len, k_len]``; True = attend.
        dropout: optional ``keras.layers.Dropout`` applied to the attention weights.

    Returns:
        ``(output [batch, q_len, heads, d_v], weights [batch, heads, q_len, k_len])``; the weights
        are float32 and exactly zero where the mask is False (a row whose keys are all masked,
        which our masks never make, gets uniform weights, as in Keras).
    """
    heads_first = lambda x: ops.transpose(x, (0, 2, 1, 3))  # noqa: E731
    output, weights = _attention_heads_first(heads_first(query), heads_first(key),
                                             heads_first(value), mask, dropout, training)
    return heads_first(output), weights


def _attention_heads_first(query, key, value, mask=None, dropout=None, training=None):
    """Equation (1) on ``[batch, heads, length, d]`` tensors: two batched matmuls, no transposes
    (the layout of the key/value caches, so a decoding step never copies them)."""
    d_k = ops.shape(query)[-1]
    scale = ops.cast(1.0 / ops.sqrt(ops.cast(d_k, "float32")), query.dtype)
    # Q K^T / sqrt(d_k): the softmax runs in float32 even under a mixed-precision policy.
    scores = ops.einsum("bhqd,bhkd->bhqk", query * scale, key)
    scores = ops.cast(scores, "float32")
    if mask is not None:
        # Masked scores get -1e9 added, so exp(-1e9 - max) is exactly 0 in float32: one add of
        # a [batch, 1, q or 1, k] bias instead of selects over [batch, heads, q, k] before and
        # after the softmax (their forward and backward passes were ~1% of a bf16 step).
        scores = scores + ops.where(mask, 0.0, _MASK_VALUE)
    weights = ops.softmax(scores, axis=-1)
    attended = weights if dropout is None else dropout(weights, training=training)
    output = ops.matmul(ops.cast(attended, value.dtype), value)
    return output, weights


def causal_mask(query_length, key_length, offset=0):
    """Boolean ``[q_len, k_len]`` mask, True where key position <= query position (section 3.2.3).

    ``offset`` is the position of the first query, for decoding step by step with a cache.
    """
    query_positions = ops.arange(query_length, dtype="int32") + ops.cast(offset, "int32")
    key_positions = ops.arange(key_length, dtype="int32")
    return ops.expand_dims(query_positions, 1) >= ops.expand_dims(key_positions, 0)


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention, section 3.2.2: Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    With ``d_model`` the size of the query's last axis, each head projects to
    ``d_k = d_v = d_model / num_heads``. Weight shapes match ``keras.layers.MultiHeadAttention``
    (query/key/value kernels ``[d_model, h, d_k]``, output kernel ``[h, d_k, d_model]``), so weights
    can be copied between the two.

    Masks are boolean with True = attend, as in Keras: ``attention_mask`` is
    ``[batch, q_len, k_len]`` (or broadcastable), ``use_causal_mask=True`` adds the decoder's
    mask of future positions. Masked scores get a large negative value before the softmax.

    Key/value cache (incremental decoding): ``cache`` is ``[batch, 2, h, length, d_k]`` (keys
    then values, heads before positions so that attention reads it without a transpose). Three
    modes:

    * ``cache_update_index=i``: a preallocated cache; the keys/values of the new query positions
      are written at ``i`` and attention runs over the whole cache (the causal mask hides the
      unfilled slots). Static shapes, for XLA.
    * ``append_to_cache=True``: the cache holds exactly the earlier positions (start from length
      0); the new keys/values are appended. Each step costs O(length so far), not O(max length):
      the faster mode without XLA.
    * neither: the cache is used as precomputed keys/values (encoder-decoder attention).

    ``cache`` may also be a pair ``(keys, values)`` of ``[batch, h, length, d_k]`` tensors (the
    call then returns a pair): the decoders use that form, so that a step never slices the keys
    and values out of a stacked tensor (a copy of the whole cache in TensorFlow).

    A call with a cache returns ``(output, cache)``.

    Example:

    >>> layer = MultiHeadAttention(num_heads=8)
    >>> x = keras.random.normal((2, 5, 512))
    >>> tuple(layer(x, x, use_causal_mask=True).shape)
    (2, 5, 512)
    """

    def __init__(self, num_heads, dropout=0.0, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.dropout = float(dropout)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self._dropout_layer = (FastDropout(self.dropout, dtype=self.dtype_policy)
                               if self.dropout > 0 else None)

    def build(self, query_shape, value_shape=None, key_shape=None):
        d_model = query_shape[-1]
        if d_model % self.num_heads:
            raise ValueError(f"MultiHeadAttention: d_model={d_model} is not divisible by "
                             f"num_heads={self.num_heads}")
        key_in = (key_shape or value_shape or query_shape)[-1]
        value_in = (value_shape or query_shape)[-1]
        self.d_model, self.key_dim = d_model, d_model // self.num_heads
        shape = (self.num_heads, self.key_dim)

        def projection(name, fan_in):
            kernel = self.add_weight(name=f"{name}_kernel", shape=(fan_in, *shape),
                                     initializer=self.kernel_initializer)
            bias = (self.add_weight(name=f"{name}_bias", shape=shape, initializer=self.bias_initializer)
                    if self.use_bias else None)
            return kernel, bias

        self.query_kernel, self.query_bias = projection("query", d_model)
        self.key_kernel, self.key_bias = projection("key", key_in)
        self.value_kernel, self.value_bias = projection("value", value_in)
        self.output_kernel = self.add_weight(name="output_kernel", shape=(*shape, d_model),
                                             initializer=self.kernel_initializer)
        self.output_bias = (self.add_weight(name="output_bias", shape=(d_model,),
                                            initializer=self.bias_initializer)
                            if self.use_bias else None)

    @staticmethod
    def _project(x, kernel, bias):
        """x W for all heads at once: ``[b, t, d] x [d, h, k] -> [b, t, h, k]``."""
        fan_in, heads, key_dim = kernel.shape
        y = project_rows(x, ops.reshape(kernel, (fan_in, heads * key_dim)),
                         None if bias is None else ops.reshape(bias, (heads * key_dim,)))
        return ops.reshape(y, (*ops.shape(x)[:-1], heads, key_dim))

    def _heads(self, x, kernel, bias):
        """Projection to ``[batch, heads, length, d_k]``, the layout attention and caches use."""
        return ops.transpose(self._project(x, kernel, bias), (0, 2, 1, 3))

    def _fused_heads(self, x, names):
        """Several projections of the same ``x`` (e.g. Q, K, V in self-attention) as one matmul
        on the concatenated kernels: ``[batch, length, len(names), heads, d_k]``."""
        kernels = [getattr(self, f"{name}_kernel") for name in names]
        fan_in, heads, key_dim = kernels[0].shape
        width = heads * key_dim
        kernel = ops.concatenate([ops.reshape(ops.cast(k, x.dtype), (fan_in, width))
                                  for k in kernels], axis=1)
        bias = (ops.concatenate([ops.reshape(ops.cast(getattr(self, f"{name}_bias"), x.dtype),
                                             (width,)) for name in names], axis=0)
                if self.use_bias else None)
        y = project_rows(x, kernel, bias)
        return ops.reshape(y, (*ops.shape(x)[:-1], len(names), heads, key_dim))

    def compute_key_value(self, value, key=None):
        """Projected keys and values stacked as a cache ``[batch, 2, h, len, d_k]``.

        Used to compute the encoder-decoder keys/values once per sentence when decoding.
        """
        if key is None or key is value:
            return ops.transpose(self._fused_heads(value, ("key", "value")), (0, 2, 3, 1, 4))
        return ops.stack([self._heads(key, self.key_kernel, self.key_bias),
                          self._heads(value, self.value_kernel, self.value_bias)], axis=1)

    def call(self, query, value, key=None, attention_mask=None, use_causal_mask=False, cache=None,
             cache_update_index=None, append_to_cache=False, return_attention_scores=False,
             training=None):
        offset = 0  # position of the first query, for the causal mask
        precomputed = cache is not None and cache_update_index is None and not append_to_cache
        pair = isinstance(cache, (tuple, list))
        if precomputed:  # encoder-decoder attention: keys/values computed once per sentence
            q = self._heads(query, self.query_kernel, self.query_bias)
            k, v = cache if pair else (cache[:, 0], cache[:, 1])
        else:
            key = value if key is None else key
            if query is value and key is value:  # self-attention: Q, K, V in one matmul
                q, k, v = ops.unstack(ops.transpose(
                    self._fused_heads(query, ("query", "key", "value")), (2, 0, 3, 1, 4)))
            else:
                q = self._heads(query, self.query_kernel, self.query_bias)
                k = self._heads(key, self.key_kernel, self.key_bias)
                v = self._heads(value, self.value_kernel, self.value_bias)
            if cache is not None:
                cached = cache if pair else (cache[:, 0], cache[:, 1])
                if append_to_cache:  # the cache holds exactly the earlier positions
                    offset = ops.shape(cached[0])[2]
                    k, v = (ops.concatenate([old, ops.cast(new, old.dtype)], axis=2)
                            for old, new in zip(cached, (k, v)))
                else:  # preallocated: write at cache_update_index
                    offset = cache_update_index
                    k, v = (ops.slice_update(old, [0, 0, cache_update_index, 0],
                                             ops.cast(new, old.dtype))
                            for old, new in zip(cached, (k, v)))
                cache = (k, v) if pair else ops.stack([k, v], axis=1)

        mask = None
        if attention_mask is not None:
            mask = ops.cast(attention_mask, "bool")
            if len(mask.shape) == 3:  # [batch, q, k] -> [batch, 1 (heads), q, k]
                mask = ops.expand_dims(mask, 1)
        if use_causal_mask:
            causal = causal_mask(ops.shape(q)[2], ops.shape(k)[2], offset)[None, None]
            mask = causal if mask is None else ops.logical_and(mask, causal)

        attended, weights = _attention_heads_first(q, k, v, mask, self._dropout_layer, training)
        # Concat(head_1, ..., head_h) W^O: heads side by side, then one matmul.
        heads, key_dim, d_model = self.output_kernel.shape
        attended = ops.transpose(attended, (0, 2, 1, 3))  # [batch, q_len, heads, d_k]
        output = project_rows(attended, ops.reshape(self.output_kernel, (heads * key_dim, d_model)),
                              self.output_bias)
        output = ops.reshape(output, (*ops.shape(attended)[:-2], d_model))

        outputs = (output,)
        if cache is not None:
            outputs += (cache,)
        if return_attention_scores:
            outputs += (weights,)
        return outputs[0] if len(outputs) == 1 else outputs

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        return query_shape

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_heads": self.num_heads,
            "dropout": self.dropout,
            "use_bias": self.use_bias,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
        })
        return config
