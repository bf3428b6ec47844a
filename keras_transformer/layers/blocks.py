"""Encoder and decoder blocks: residual connections and layer normalization (paper section 3.1).

Each block writes its sub-layers once (``_flow``) and offers fixed-arity calls over them:
``call`` (the functional graph), ``call_with_scores`` (attention weights for plots) and, in the
decoder, ``call_cached`` (one decoding step with a self-attention cache).
"""

import keras
from keras import ops

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.dropout import dropout_layer
from keras_transformer.layers.feedforward import PositionwiseFeedForward
from keras_transformer.layers.normalization import layer_normalization


class _Sublayers(keras.layers.Layer):
    """Wraps each sub-layer as LayerNorm(x + Dropout(Sublayer(x))) ("post", sections 3.1 and
    5.4) or x + Dropout(Sublayer(LayerNorm(x))) ("pre", a later, more stable variant).

    ``fast`` picks the fast paths of dropout, layer normalization, attention and the
    feed-forward network (``False``: Keras' stock layers and einsum projections; with
    ``attention_window`` also the band mask instead of the blocked restricted attention).
    ``key_dim``: d_k of every head (None: d_model / num_heads); ``value_dim``: d_v (None:
    d_k). ``attention_window``: r of
    the self-attention (section 4; None: full); encoder-decoder attention stays full.
    """

    def __init__(
        self,
        num_heads,
        d_ff,
        dropout=0.1,
        attention_dropout=0.0,
        norm="post",
        layer_norm_epsilon=1e-6,
        fast=True,
        key_dim=None,
        attention_window=None,
        value_dim=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if norm not in ("post", "pre"):
            raise ValueError(f"{type(self).__name__}: norm={norm!r} must be 'post' or 'pre'")
        self.num_heads = int(num_heads)
        self.d_ff = int(d_ff)
        self.dropout = float(dropout)
        self.attention_dropout = float(attention_dropout)
        self.norm = norm
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.fast = bool(fast)
        self.key_dim = None if key_dim is None else int(key_dim)
        self.value_dim = None if value_dim is None else int(value_dim)
        self.attention_window = None if attention_window is None else int(attention_window)

    def _attention(self, name, query_shape, value_shape, window=None):
        layer = MultiHeadAttention(
            self.num_heads,
            dropout=self.attention_dropout,
            fast=self.fast,
            key_dim=self.key_dim,
            value_dim=self.value_dim,
            attention_window=window,
            blocked=self.fast,
            name=name,
            dtype=self.dtype_policy,
        )
        layer.build(query_shape, value_shape)
        return layer

    def _layer_norm(self, name, shape):
        layer = layer_normalization(
            self.layer_norm_epsilon, self.fast, name=name, dtype=self.dtype_policy
        )
        layer.build(shape)
        return layer

    def _build_feed_forward(self, shape):
        self.feed_forward = PositionwiseFeedForward(
            self.d_ff, fast=self.fast, name="feed_forward", dtype=self.dtype_policy
        )
        self.feed_forward.build(shape)

    def _build_norms(self, names, shape):
        for name in names:
            setattr(self, name, self._layer_norm(name, shape))
        self._dropout = dropout_layer(self.dropout, self.fast, dtype=self.dtype_policy)

    def _residual(self, x, sublayer, norm_layer, training):
        """One residual sub-layer; ``sublayer`` maps its input to ``(output, extra)``."""
        if self.norm == "pre":
            output, extra = sublayer(norm_layer(x))
            return x + self._dropout(output, training=training), extra
        output, extra = sublayer(x)
        return norm_layer(x + self._dropout(output, training=training)), extra

    def _feed_forward(self, x, training):
        return self._residual(
            x, lambda y: (self.feed_forward(y), None), self.feed_forward_norm, training
        )[0]

    def compute_output_shape(self, inputs_shape, *args, **kwargs):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "d_ff": self.d_ff,
                "dropout": self.dropout,
                "attention_dropout": self.attention_dropout,
                "norm": self.norm,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "fast": self.fast,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "attention_window": self.attention_window,
            }
        )
        return config


def _key_mask(padding_mask):
    """``[batch, key_len]`` -> ``[batch, 1 (queries), key_len]`` (or None)."""
    return None if padding_mask is None else ops.expand_dims(padding_mask, 1)


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderBlock(_Sublayers):
    """One of the N encoder layers: self-attention, then a feed-forward network (section 3.1).

    ``padding_mask`` is boolean ``[batch, source_len]``, True at real tokens; padded keys get
    zero attention weight. ``call`` returns ``[batch, source_len, d_model]``;
    ``call_with_scores`` returns ``(outputs, weights [batch, heads, source_len, source_len])``.

    Example:

    >>> block = EncoderBlock(num_heads=8, d_ff=2048)
    >>> padding_mask = keras.ops.ones((2, 9), "bool")
    >>> tuple(block(keras.ops.zeros((2, 9, 512)), padding_mask=padding_mask).shape)
    (2, 9, 512)
    """

    def build(self, inputs_shape, padding_mask_shape=None):
        # Creation order = the order of weights (and of their random initial values).
        self.self_attention = self._attention(
            "self_attention", inputs_shape, inputs_shape, self.attention_window
        )
        self._build_feed_forward(inputs_shape)
        self._build_norms(("self_attention_norm", "feed_forward_norm"), inputs_shape)

    def _flow(self, x, attend, training):
        """Figure 1, encoder layer: self-attention sub-layer, then the feed-forward one."""
        x, weights = self._residual(x, attend, self.self_attention_norm, training)
        return self._feed_forward(x, training), weights

    def call(self, inputs, padding_mask=None, training=None):
        mask = _key_mask(padding_mask)
        attend = lambda x: (self.self_attention(x, x, attention_mask=mask, training=training), None)
        return self._flow(inputs, attend, training)[0]

    def call_with_scores(self, inputs, padding_mask=None, training=None):
        mask = _key_mask(padding_mask)
        attend = lambda x: self.self_attention.call_with_scores(
            x, x, attention_mask=mask, training=training
        )
        return self._flow(inputs, attend, training)


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderBlock(_Sublayers):
    """One of the N decoder layers: masked self-attention, encoder-decoder attention, then a
    feed-forward network (section 3.1).

    Self-attention always hides future positions (section 3.2.3). ``encoder_padding_mask``
    (boolean ``[batch, source_len]``) hides padded source tokens from encoder-decoder attention.

    * ``block(x, encoder_output, encoder_padding_mask)`` -> ``[batch, target_len, d_model]``;
    * ``block.call_with_scores(...)`` -> ``(outputs, (self_weights, cross_weights))``;
    * ``block.call_cached(x, self_cache, cross_cache, encoder_padding_mask,
      cache_update_index=None)`` -> ``(outputs, self_cache)``, with ``cross_cache`` from
      ``block.compute_cross_cache(encoder_output)``, ``self_cache`` from
      ``block.empty_self_cache(batch, length)``, in the cache formats of
      :class:`MultiHeadAttention` (a rolling window with ``attention_window``).

    Example:

    >>> block = DecoderBlock(num_heads=8, d_ff=2048)
    >>> memory = keras.ops.zeros((2, 9, 512))
    >>> tuple(block(keras.ops.zeros((2, 4, 512)), memory).shape)
    (2, 4, 512)
    """

    def build(self, inputs_shape, encoder_output_shape=None, *args, **kwargs):
        encoder_output_shape = encoder_output_shape or inputs_shape
        self.self_attention = self._attention(
            "self_attention", inputs_shape, inputs_shape, self.attention_window
        )
        self.cross_attention = self._attention(
            "cross_attention", inputs_shape, encoder_output_shape
        )
        self._build_feed_forward(inputs_shape)
        norms = ("self_attention_norm", "cross_attention_norm", "feed_forward_norm")
        self._build_norms(norms, inputs_shape)

    def _flow(self, x, self_attend, cross_attend, training):
        """Figure 1, decoder layer: masked self-attention, encoder-decoder attention, then the
        feed-forward sub-layer. Returns ``(x, self_extra, cross_extra)``."""
        x, self_extra = self._residual(x, self_attend, self.self_attention_norm, training)
        x, cross_extra = self._residual(x, cross_attend, self.cross_attention_norm, training)
        return self._feed_forward(x, training), self_extra, cross_extra

    def call(self, inputs, encoder_output=None, encoder_padding_mask=None, training=None):
        mask = _key_mask(encoder_padding_mask)
        self_attend = lambda x: (
            self.self_attention(x, x, use_causal_mask=True, training=training),
            None,
        )
        cross_attend = lambda x: (
            self.cross_attention(x, encoder_output, attention_mask=mask, training=training),
            None,
        )
        return self._flow(inputs, self_attend, cross_attend, training)[0]

    def call_with_scores(self, inputs, encoder_output, encoder_padding_mask=None, training=None):
        mask = _key_mask(encoder_padding_mask)
        self_attend = lambda x: self.self_attention.call_with_scores(
            x, x, use_causal_mask=True, training=training
        )
        cross_attend = lambda x: self.cross_attention.call_with_scores(
            x, encoder_output, attention_mask=mask, training=training
        )
        x, self_weights, cross_weights = self._flow(inputs, self_attend, cross_attend, training)
        return x, (self_weights, cross_weights)

    def empty_self_cache(self, batch, length=0):
        """The self-attention cache before the first step (see ``MultiHeadAttention``)."""
        return self.self_attention.empty_cache(batch, length)

    def step_projection(self):
        """The self-attention's Q, K, V kernels side by side (``()`` on the plain path):
        what every decoding step multiplies by, computed once per search."""
        return self.self_attention.fused_projection()

    def compute_cross_cache(self, encoder_output):
        """Encoder-decoder ``(keys, values)``: computed once per sentence when decoding."""
        return self.cross_attention.compute_cache(encoder_output)

    def call_cached(
        self,
        inputs,
        self_cache,
        cross_cache,
        encoder_padding_mask=None,
        cache_update_index=None,
        training=None,
        beams=1,
        projection=(),
    ):
        """One decoding step of new positions ``inputs`` over ``self_cache`` and the
        precomputed ``cross_cache``; ``beams=g``: ``cross_cache`` and ``encoder_padding_mask``
        hold one row per ``g`` rows of ``inputs`` (``MultiHeadAttention.call_precomputed``);
        ``projection``: the self-attention's fused Q/K/V kernel from
        :meth:`step_projection`, computed once per search. Returns ``(x, self_cache)``."""
        mask = _key_mask(encoder_padding_mask)
        self_attend = lambda x: self.self_attention.call_cached(
            x, self_cache, cache_update_index, training=training, projection=projection
        )
        cross_attend = lambda x: (
            self.cross_attention.call_precomputed(
                x, cross_cache, mask, training=training, beams=beams
            ),
            None,
        )
        x, self_cache, _ = self._flow(inputs, self_attend, cross_attend, training)
        return x, self_cache
