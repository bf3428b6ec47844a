"""The paper's building blocks as Keras layers, each registered for ``.keras`` serialization."""

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.blocks import DecoderBlock, EncoderBlock
from keras_transformer.layers.dot_product import (
    attention,
    causal_mask,
    scaled_dot_product_attention,
)
from keras_transformer.layers.dropout import FastDropout, dropout_layer
from keras_transformer.layers.embedding import SharedEmbedding, TokenEmbedding
from keras_transformer.layers.feedforward import PositionwiseFeedForward
from keras_transformer.layers.local_attention import band_mask, blocked_attention
from keras_transformer.layers.masking import PaddingMask
from keras_transformer.layers.normalization import LayerNormalization, layer_normalization
from keras_transformer.layers.positional import PositionalEncoding, sinusoidal_encoding

__all__ = [
    "DecoderBlock",
    "EncoderBlock",
    "FastDropout",
    "LayerNormalization",
    "MultiHeadAttention",
    "PaddingMask",
    "PositionalEncoding",
    "PositionwiseFeedForward",
    "SharedEmbedding",
    "TokenEmbedding",
    "attention",
    "band_mask",
    "blocked_attention",
    "causal_mask",
    "dropout_layer",
    "layer_normalization",
    "scaled_dot_product_attention",
    "sinusoidal_encoding",
]
