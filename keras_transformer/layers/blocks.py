"""Encoder and decoder blocks: residual connections and layer normalization (paper section 3.1)."""

import keras
from keras import ops

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.dropout import FastDropout
from keras_transformer.layers.feedforward import PositionwiseFeedForward
from keras_transformer.layers.normalization import LayerNormalization


class _Sublayers(keras.layers.Layer):
    """Wraps each sub-layer as LayerNorm(x + Dropout(Sublayer(x))) ("post", section 3.1 and 5.4)
    or x + Dropout(Sublayer(LayerNorm(x))) ("pre", a later, more stable variant)."""

    def __init__(self, num_heads, d_ff, dropout=0.1, attention_dropout=0.0, norm="post",
                 layer_norm_epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        if norm not in ("post", "pre"):
            raise ValueError(f"{type(self).__name__}: norm={norm!r} must be 'post' or 'pre'")
        self.num_heads = int(num_heads)
        self.d_ff = int(d_ff)
        self.dropout = float(dropout)
        self.attention_dropout = float(attention_dropout)
        self.norm = norm
        self.layer_norm_epsilon = float(layer_norm_epsilon)

    def _attention(self, name):
        return MultiHeadAttention(self.num_heads, dropout=self.attention_dropout, name=name,
                                  dtype=self.dtype_policy)

    def _layer_norm(self, name):
        return LayerNormalization(epsilon=self.layer_norm_epsilon, name=name,
                                  dtype=self.dtype_policy)

    def _residual(self, x, sublayer, norm_layer, training):
        """Applies one residual sub-layer; ``sublayer`` maps the (maybe normalized) input to
        ``(output, extras)``."""
        if self.norm == "pre":
            output, extras = sublayer(norm_layer(x))
            return x + self._dropout(output, training=training), extras
        output, extras = sublayer(x)
        return norm_layer(x + self._dropout(output, training=training)), extras

    def compute_output_shape(self, inputs_shape, *args, **kwargs):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update({
            "num_heads": self.num_heads,
            "d_ff": self.d_ff,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "norm": self.norm,
            "layer_norm_epsilon": self.layer_norm_epsilon,
        })
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderBlock(_Sublayers):
    """One of the N encoder layers: self-attention, then a feed-forward network (section 3.1).

    ``padding_mask`` is boolean ``[batch, source_len]``, True at real tokens; padded keys get
    zero attention weight.

    Example:

    >>> block = EncoderBlock(num_heads=8, d_ff=2048)
    >>> padding_mask = keras.ops.ones((2, 9), "bool")
    >>> tuple(block(keras.ops.zeros((2, 9, 512)), padding_mask=padding_mask).shape)
    (2, 9, 512)
    """

    def build(self, inputs_shape, padding_mask_shape=None):
        self.self_attention = self._attention("self_attention")
        self.self_attention.build(inputs_shape, inputs_shape)
        self.feed_forward = PositionwiseFeedForward(self.d_ff, name="feed_forward",
                                                    dtype=self.dtype_policy)
        self.feed_forward.build(inputs_shape)
        self.self_attention_norm = self._layer_norm("self_attention_norm")
        self.feed_forward_norm = self._layer_norm("feed_forward_norm")
        for norm in (self.self_attention_norm, self.feed_forward_norm):
            norm.build(inputs_shape)
        self._dropout = FastDropout(self.dropout, dtype=self.dtype_policy)

    def call(self, inputs, padding_mask=None, return_attention_scores=False, training=None):
        mask = None if padding_mask is None else ops.expand_dims(padding_mask, 1)  # [B, 1, S]

        def attend(x):
            output, weights = self.self_attention(x, x, attention_mask=mask, training=training,
                                                  return_attention_scores=True)
            return output, weights

        x, weights = self._residual(inputs, attend, self.self_attention_norm, training)
        x, _ = self._residual(x, lambda y: (self.feed_forward(y), None), self.feed_forward_norm,
                              training)
        return (x, weights) if return_attention_scores else x


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderBlock(_Sublayers):
    """One of the N decoder layers: masked self-attention, encoder-decoder attention, then a
    feed-forward network (section 3.1).

    Self-attention always hides future positions (section 3.2.3). ``encoder_padding_mask``
    (boolean ``[batch, source_len]``) hides padded source tokens from encoder-decoder attention.

    For incremental decoding pass ``self_attention_cache`` (``[batch, 2, h, length, d_k]``) with
    ``cache_update_index`` (preallocated) or ``append_to_cache=True`` (growing; see
    :class:`MultiHeadAttention`) and ``cross_attention_cache`` from
    ``block.cross_attention.compute_key_value(encoder_output)``; the call then also returns the
    updated self-attention cache. With ``return_attention_scores`` it also returns the
    ``(self, cross)`` attention weights ``[batch, heads, target_len, key_len]``.

    Example:

    >>> block = DecoderBlock(num_heads=8, d_ff=2048)
    >>> memory = keras.ops.zeros((2, 9, 512))
    >>> tuple(block(keras.ops.zeros((2, 4, 512)), memory).shape)
    (2, 4, 512)
    """

    def build(self, inputs_shape, encoder_output_shape=None, *args, **kwargs):
        encoder_output_shape = encoder_output_shape or inputs_shape
        self.self_attention = self._attention("self_attention")
        self.self_attention.build(inputs_shape, inputs_shape)
        self.cross_attention = self._attention("cross_attention")
        self.cross_attention.build(inputs_shape, encoder_output_shape)
        self.feed_forward = PositionwiseFeedForward(self.d_ff, name="feed_forward",
                                                    dtype=self.dtype_policy)
        self.feed_forward.build(inputs_shape)
        self.self_attention_norm = self._layer_norm("self_attention_norm")
        self.cross_attention_norm = self._layer_norm("cross_attention_norm")
        self.feed_forward_norm = self._layer_norm("feed_forward_norm")
        for norm in (self.self_attention_norm, self.cross_attention_norm, self.feed_forward_norm):
            norm.build(inputs_shape)
        self._dropout = FastDropout(self.dropout, dtype=self.dtype_policy)

    def call(self, inputs, encoder_output=None, encoder_padding_mask=None,
             self_attention_cache=None, cross_attention_cache=None, cache_update_index=None,
             append_to_cache=False, return_attention_scores=False, training=None):
        cross_mask = (None if encoder_padding_mask is None
                      else ops.expand_dims(encoder_padding_mask, 1))  # [B, 1, S]

        def self_attend(x):
            outputs = self.self_attention(
                x, x, use_causal_mask=True, cache=self_attention_cache,
                cache_update_index=cache_update_index, append_to_cache=append_to_cache,
                return_attention_scores=True,
                training=training)
            return outputs[0], outputs[1:]

        def cross_attend(x):
            outputs = self.cross_attention(
                x, encoder_output, attention_mask=cross_mask, cache=cross_attention_cache,
                return_attention_scores=True, training=training)
            return outputs[0], outputs[-1]

        x, self_extras = self._residual(inputs, self_attend, self.self_attention_norm, training)
        x, cross_weights = self._residual(x, cross_attend, self.cross_attention_norm, training)
        x, _ = self._residual(x, lambda y: (self.feed_forward(y), None), self.feed_forward_norm,
                              training)
        outputs = (x,)
        if self_attention_cache is not None:
            outputs += (self_extras[0],)
        if return_attention_scores:
            outputs += ((self_extras[-1], cross_weights),)
        return outputs[0] if len(outputs) == 1 else outputs
