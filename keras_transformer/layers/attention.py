"""Scaled dot-product and multi-head attention with masks and a key/value cache (section 3.2).

One cache format: a pair ``(keys, values)`` of ``[batch, heads, length, d_k]`` and
``[batch, heads, length, d_v]`` tensors (heads before positions, the layout attention reads
without a transpose).

Plain and fast: with ``fast=False`` the layer runs equation (1) and the projections of
section 3.2.2 in the stock form (one ``einsum`` per projection, masked scores selected with
``where``); with ``fast=True`` (the default) it runs the same maths as flattened 2-D matmuls, Q, K
and V of self-attention in one matmul, and the mask as an added bias. ``tests/test_layers.py``
checks that both give the same outputs and gradients; ``results/benchmarks.md`` has the timings.

With ``attention_window=r`` (self-attention only) each query sees the keys within distance r
(section 4, ``local_attention.py``): ``blocked=True`` runs the O(n r d) blocked form, ``False``
the band mask over full attention; the cache of ``call_cached`` then keeps the last r positions
only: a ``WindowCache(keys, values, positions)``, ``positions`` int32 ``[batch, r]`` (-1: empty
slot).
"""

import keras
from keras import ops

from keras_transformer.layers.beam_rows import group_rows, ungroup_rows
from keras_transformer.layers.dot_product import attention, causal_mask
from keras_transformer.layers.dropout import dropout_layer
from keras_transformer.layers.local_attention import (
    WindowCache,
    band_mask,
    blocked_attention,
    key_mask_of,
    next_position,
    roll_window,
)
from keras_transformer.layers.projection import project_rows


def _heads_mask(attention_mask, use_causal_mask, query_length, key_length, offset, window=None):
    """The boolean mask of one call, ``[batch or 1, 1, q_len, k_len]`` (or None)."""
    mask = None
    if attention_mask is not None:
        mask = ops.cast(attention_mask, "bool")
        if len(mask.shape) == 3:  # [batch, q, k] -> [batch, 1 (heads), q, k]
            mask = ops.expand_dims(mask, 1)
    extra = None
    if window is not None:  # section 4: only keys within distance r (the reference form)
        extra = band_mask(query_length, key_length, window, use_causal_mask, offset)[None, None]
    elif use_causal_mask:
        extra = causal_mask(query_length, key_length, offset)[None, None]
    if extra is not None:
        mask = extra if mask is None else ops.logical_and(mask, extra)
    return mask


def _split_heads(y, x, heads, key_dim):
    """Projected rows ``[batch * length, h * d_k]`` of ``x`` ``[batch, length, d]`` as
    ``[batch, heads, length, d_k]``; one position (a decoding step) needs no transpose."""
    length = x.shape[1]
    if length == 1:
        return ops.reshape(y, (-1, heads, 1, key_dim))
    length = ops.shape(x)[1] if length is None else length
    return ops.transpose(ops.reshape(y, (-1, length, heads, key_dim)), (0, 2, 1, 3))


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O (section 3.2.2).

    head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V). With ``d_model`` the size of the query's last
    axis, each head projects queries and keys to ``d_k = key_dim``, by default
    ``d_model / num_heads``, and values to ``d_v = value_dim``, by default ``d_k`` (the paper
    sets d_k = d_v; its Table 3 row (B) shrinks d_k alone). ``h * d_v`` may differ from
    ``d_model``: W^O maps back. Weight shapes match ``keras.layers.MultiHeadAttention``
    (query/key kernels ``[d_model, h, d_k]``, value kernel ``[d_model, h, d_v]``, output kernel
    ``[h, d_v, d_model]``).

    Masks are boolean with True = attend, as in Keras: ``attention_mask`` is
    ``[batch, q_len, k_len]`` (or broadcastable); ``use_causal_mask=True`` adds the decoder's
    mask of future positions (section 3.2.3). ``attention_window=r``: local restricted
    self-attention (section 4; module docstring), ``blocked`` picks its form.

    Methods, each with a fixed return:

    * ``layer(query, value)`` -> output ``[batch, q_len, d_model]``;
    * ``layer.call_with_scores(query, value)`` -> ``(output, weights [batch, h, q_len, k_len])``;
    * ``layer.call_cached(query, cache, cache_update_index=None)`` -> ``(output, cache)``: causal
      self-attention of new positions with the ``(keys, values)`` of the earlier ones; with
      ``cache_update_index=None`` the cache holds exactly the earlier positions and grows,
      otherwise it is preallocated (static shapes, for XLA) and written at that index; with
      ``attention_window`` it is a rolling window of r positions (``layer.empty_cache``);
    * ``layer.compute_cache(value)`` -> ``(keys, values)`` of a fixed ``value`` (the encoder
      output), and ``layer.call_precomputed(query, cache, attention_mask)`` -> output.

    Example:

    >>> layer = MultiHeadAttention(num_heads=8)
    >>> x = keras.random.normal((2, 5, 512))
    >>> tuple(layer(x, x, use_causal_mask=True).shape)
    (2, 5, 512)
    """

    def __init__(
        self,
        num_heads,
        dropout=0.0,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        fast=True,
        key_dim=None,
        attention_window=None,
        blocked=True,
        value_dim=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        sizes = (
            ("key_dim", key_dim),
            ("value_dim", value_dim),
            ("attention_window", attention_window),
        )
        for name, size in sizes:
            if size is not None and (isinstance(size, bool) or int(size) != size or size < 1):
                raise ValueError(f"MultiHeadAttention: {name}={size!r} must be a positive integer")
        self.head_size = None if key_dim is None else int(key_dim)  # the argument; key_dim: d_k
        self.value_size = None if value_dim is None else int(value_dim)  # value_dim: d_v
        self.attention_window = None if attention_window is None else int(attention_window)
        self.blocked = bool(blocked)
        self.num_heads = int(num_heads)
        self.dropout = float(dropout)
        self.use_bias = bool(use_bias)
        self.fast = bool(fast)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self._dropout_layer = (
            dropout_layer(self.dropout, self.fast, dtype=self.dtype_policy)
            if self.dropout > 0
            else None
        )

    def build(self, query_shape, value_shape=None, key_shape=None):
        d_model = query_shape[-1]
        if self.head_size is None and d_model % self.num_heads:
            raise ValueError(
                f"MultiHeadAttention: d_model={d_model} is not divisible by "
                f"num_heads={self.num_heads} (or give key_dim)"
            )
        key_in = (key_shape or value_shape or query_shape)[-1]
        value_in = (value_shape or query_shape)[-1]
        self.d_model, self.key_dim = d_model, self.head_size or d_model // self.num_heads
        self.value_dim = self.value_size or self.key_dim

        def projection(name, fan_in, size):
            shape = (self.num_heads, size)
            kernel = self.add_weight(
                name=f"{name}_kernel", shape=(fan_in, *shape), initializer=self.kernel_initializer
            )
            bias = None
            if self.use_bias:
                bias = self.add_weight(
                    name=f"{name}_bias", shape=shape, initializer=self.bias_initializer
                )
            return kernel, bias

        self.query_kernel, self.query_bias = projection("query", d_model, self.key_dim)
        self.key_kernel, self.key_bias = projection("key", key_in, self.key_dim)
        self.value_kernel, self.value_bias = projection("value", value_in, self.value_dim)
        self.output_kernel = self.add_weight(
            name="output_kernel",
            shape=(self.num_heads, self.value_dim, d_model),
            initializer=self.kernel_initializer,
        )
        self.output_bias = None
        if self.use_bias:
            self.output_bias = self.add_weight(
                name="output_bias", shape=(d_model,), initializer=self.bias_initializer
            )

    # ------------------------------------------------------------------ projections
    def _heads(self, x, name):
        """x W for all heads: ``[batch, length, d] -> [batch, heads, length, d_k or d_v]``."""
        kernel = ops.cast(getattr(self, f"{name}_kernel"), x.dtype)
        bias = getattr(self, f"{name}_bias")
        if not self.fast:  # the stock form: an einsum, then the bias
            y = ops.einsum("btd,dhk->bthk", x, kernel)
            y = y if bias is None else y + ops.cast(bias, x.dtype)
            return ops.transpose(y, (0, 2, 1, 3))
        fan_in, heads, key_dim = kernel.shape
        flat_bias = None if bias is None else ops.reshape(bias, (heads * key_dim,))
        y = project_rows(x, ops.reshape(kernel, (fan_in, heads * key_dim)), flat_bias)
        return _split_heads(y, x, heads, key_dim)

    def fused_projection(self, names=("query", "key", "value")):
        """The kernels of several projections of one input side by side, for one matmul:
        ``(kernel [fan_in, h * (d_k + d_k + d_v)], bias [...])`` (``(kernel,)`` without biases)
        in the compute dtype, or ``()`` on the plain path. A decoding loop computes it once,
        before its first step, and passes it to :meth:`call_cached` (``projection=``) instead
        of concatenating the kernels at every step."""
        if not self.fast:
            return ()
        kernels = [getattr(self, f"{name}_kernel") for name in names]
        fan_in, dtype = kernels[0].shape[0], self.compute_dtype
        widths = [self.num_heads * self._head_size(name) for name in names]
        kernel = ops.concatenate(
            [ops.reshape(ops.cast(k, dtype), (fan_in, w)) for k, w in zip(kernels, widths)], 1
        )
        if not self.use_bias:
            return (kernel,)
        biases = [getattr(self, f"{name}_bias") for name in names]
        bias = ops.concatenate(
            [ops.reshape(ops.cast(b, dtype), (w,)) for b, w in zip(biases, widths)], 0
        )
        return kernel, bias

    def _head_size(self, name):
        """d_v for the value projection, d_k for the query and key projections."""
        return self.value_dim if name == "value" else self.key_dim

    def _fused_heads(self, x, names, projection=()):
        """Several projections of the same ``x`` as one matmul on the concatenated kernels
        (``projection``: those of :meth:`fused_projection`, computed before): a list of
        ``[batch, heads, length, d_k or d_v]`` (fast path; plain: one :meth:`_heads` each)."""
        if not self.fast:
            return [self._heads(x, name) for name in names]
        kernel, *bias = projection or self.fused_projection(names)
        y = project_rows(x, ops.cast(kernel, x.dtype), *bias)  # [rows, h * (d_k ... + d_v)]
        heads, parts, start = self.num_heads, [], 0
        for name in names:  # column slices: the kernel's width may be unknown when traced
            size = self._head_size(name)
            parts.append(_split_heads(y[:, start : start + heads * size], x, heads, size))
            start += heads * size
        return parts

    def _output(self, attended):
        """Concat(head_1, ..., head_h) W^O: ``[batch, heads, q_len, d_v] -> [batch, q_len, d]``."""
        kernel = ops.cast(self.output_kernel, attended.dtype)
        if not self.fast:
            attended = ops.transpose(attended, (0, 2, 1, 3))  # [batch, q_len, heads, d_v]
            output = ops.einsum("bqhk,hkd->bqd", attended, kernel)
            return (
                output
                if self.output_bias is None
                else output + ops.cast(self.output_bias, output.dtype)
            )
        heads, value_dim, d_model = kernel.shape
        q_len = attended.shape[2]
        if q_len != 1:  # one query (a decoding step): the heads are already rows
            attended = ops.transpose(attended, (0, 2, 1, 3))  # [batch, q_len, heads, d_v]
        output = project_rows(
            attended, ops.reshape(kernel, (heads * value_dim, d_model)), self.output_bias
        )
        q_len = ops.shape(attended)[1] if q_len is None else q_len
        return ops.reshape(output, (-1, q_len, d_model))

    def _attend(self, q, k, v, mask, training):
        """Equation (1) over the heads, then W^O: ``(output, weights)``."""
        attended, weights = attention(
            q, k, v, mask, self._dropout_layer, training=training, fast=self.fast
        )
        return self._output(attended), weights

    def _project_qkv(self, query, value, key):
        key = value if key is None else key
        if query is value and key is value:  # self-attention: Q, K, V of one input
            return self._fused_heads(query, ("query", "key", "value"))
        return self._heads(query, "query"), self._heads(key, "key"), self._heads(value, "value")

    # ------------------------------------------------------------------ public calls
    def _ready(self, query, value=None, key=None):
        """What ``__call__`` does before ``call``, for the methods called directly: build the
        layer on first use, cast float inputs to the compute dtype (keeping ``query is value``
        for self-attention)."""
        if not self.built:
            self.build(query.shape, None if value is None else value.shape)
        cast = lambda x: ops.cast(x, self.compute_dtype)
        new_query = cast(query)
        new_value = None if value is None else new_query if value is query else cast(value)
        new_key = None if key is None or key is value else cast(key)
        return new_query, new_value, new_key

    def call_with_scores(
        self, query, value, key=None, attention_mask=None, use_causal_mask=False, training=None
    ):
        """Returns ``(output [batch, q_len, d_model], weights [batch, h, q_len, k_len])``."""
        query, value, key = self._ready(query, value, key)
        q, k, v = self._project_qkv(query, value, key)
        mask = _heads_mask(
            attention_mask,
            use_causal_mask,
            ops.shape(q)[2],
            ops.shape(k)[2],
            0,
            self.attention_window,
        )
        return self._attend(q, k, v, mask, training)

    def call(
        self, query, value, key=None, attention_mask=None, use_causal_mask=False, training=None
    ):
        key_mask = key_mask_of(attention_mask)
        if self.attention_window is None or not self.blocked or key_mask is False:
            return self.call_with_scores(
                query, value, key, attention_mask, use_causal_mask, training=training
            )[0]
        # Section 4 in O(n r d): blocks of r positions and their neighbours (local_attention.py).
        query, value, key = self._ready(query, value, key)
        q, k, v = self._project_qkv(query, value, key)
        window, dropout = self.attention_window, self._dropout_layer
        attended = blocked_attention(
            q, k, v, window, key_mask, use_causal_mask, dropout, training, fast=self.fast
        )
        return self._output(attended)

    def compute_cache(self, value):
        """The ``(keys, values)`` of a fixed ``value`` ``[batch, length, d]`` (the encoder
        output): computed once per sentence for encoder-decoder attention."""
        value = self._ready(value)[0]
        keys, values = self._fused_heads(value, ("key", "value"))
        return keys, values

    def call_precomputed(self, query, cache, attention_mask=None, training=None, beams=1):
        """Attention of ``query`` over the precomputed ``cache = (keys, values)``: the output
        ``[batch, q_len, d_model]``. ``beams=g``: the cache (and ``attention_mask``) hold one
        row per ``g`` rows of ``query``, which attend to it as ``g * q_len`` queries of that row
        (``beam_rows.py``; the same weights as over a cache repeated ``g`` times)."""
        q = self._heads(self._ready(query)[0], "query")  # [batch * g, h, q_len, d_k]
        keys, values = cache  # [batch, h, k_len, d_k] and [batch, h, k_len, d_v]
        q = group_rows(q, beams) if beams > 1 else q  # [batch, h, g * q_len, d_k]
        sizes = (ops.shape(q)[2], ops.shape(keys)[2])
        mask = _heads_mask(attention_mask, False, *sizes, 0, self.attention_window)
        attended, _ = attention(q, keys, values, mask, self._dropout_layer, training, self.fast)
        return self._output(ungroup_rows(attended, beams) if beams > 1 else attended)

    def empty_cache(self, batch, length=0):
        """The self-attention cache before the first position: ``(keys, values)`` of ``length``
        zero positions, or with ``attention_window`` a :class:`WindowCache` of r empty slots."""
        dtype, slots = self.compute_dtype, length
        if self.attention_window is not None:
            slots = self.attention_window
        keys = ops.zeros((batch, self.num_heads, slots, self.key_dim), dtype)
        values = ops.zeros((batch, self.num_heads, slots, self.value_dim), dtype)
        if self.attention_window is None:
            return keys, values
        positions = -ops.ones((batch, self.attention_window), "int32")
        return WindowCache(keys, values, positions)

    def call_cached(self, query, cache, cache_update_index=None, training=None, projection=()):
        """Causal self-attention of new positions ``query`` ``[batch, new, d]``.

        ``cache = (keys, values)``, ``[batch, h, length, d_k]`` and ``[..., d_v]``. With
        ``cache_update_index=None`` the cache holds exactly the earlier positions and the new
        keys/values are appended (a step costs O(positions so far)); otherwise the cache is
        preallocated and the new keys/values are written at ``cache_update_index`` (the causal
        mask hides the unfilled slots; static shapes for XLA). ``projection``: this layer's
        :meth:`fused_projection`, computed once before the loop (else at every call). Returns
        ``(output, cache)``.
        """
        query = self._ready(query)[0]
        q, k, v = self._fused_heads(query, ("query", "key", "value"), projection)
        if isinstance(cache, WindowCache):
            return self._call_window_cached(q, k, v, cache, cache_update_index, training)
        old_keys, old_values = cache
        if cache_update_index is None:
            offset = ops.shape(old_keys)[2]
            k = ops.concatenate([old_keys, ops.cast(k, old_keys.dtype)], axis=2)
            v = ops.concatenate([old_values, ops.cast(v, old_values.dtype)], axis=2)
        else:
            offset = cache_update_index
            start = [0, 0, cache_update_index, 0]
            k = ops.slice_update(old_keys, start, ops.cast(k, old_keys.dtype))
            v = ops.slice_update(old_values, start, ops.cast(v, old_values.dtype))
        if cache_update_index is None and q.shape[2] == 1:
            mask = None  # one position after all the cached ones sees every key (3.2.3)
        else:
            mask = _heads_mask(None, True, ops.shape(q)[2], ops.shape(k)[2], offset)
        return self._attend(q, k, v, mask, training)[0], (k, v)

    def _call_window_cached(self, q, k, v, cache, cache_update_index, training):
        """``call_cached`` over a rolling window: the r cached positions and the new ones are
        attended under the window mask, then the last r of them are kept (a fixed size)."""
        offset = next_position(cache) if cache_update_index is None else cache_update_index
        keys, values, mask, kept = roll_window(cache, k, v, offset, self.attention_window)
        return self._attend(q, keys, values, mask, training)[0], kept

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        return query_shape

    def projection_weights(self) -> dict:
        """The weights of section 3.2.2 by role, for converters: ``{"query", "key", "value":
        (kernel [d_in, h, d_k or d_v], bias or None), "output": (kernel [h, d_v, d_model],
        bias [d_model] or None)}`` (the layer's variables; the same layout whichever path runs)."""
        return {
            "query": (self.query_kernel, self.query_bias),
            "key": (self.key_kernel, self.key_bias),
            "value": (self.value_kernel, self.value_bias),
            "output": (self.output_kernel, self.output_bias),
        }

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "dropout": self.dropout,
                "use_bias": self.use_bias,
                "fast": self.fast,
                "key_dim": self.head_size,
                "value_dim": self.value_size,
                "attention_window": self.attention_window,
                "blocked": self.blocked,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
