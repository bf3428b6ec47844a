"""Each fast path equals the plain form beside it (values and gradients).

``fast=False`` layers run the stock Keras/TF form of the paper's equations (einsum projections,
``where`` masks, ``keras.layers.Dropout``, ``keras.layers.LayerNormalization``, ``Dense``);
``fast=True`` (the default) the flattened matmuls, fused Q/K/V, additive masks, closed-form
LayerNorm gradient and 16-bit dropout.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer import layers as kt_layers
from keras_transformer.layers.dot_product import attention


def _values_and_gradients(layer, inputs, call):
    """Output, and the gradients of a fixed random projection of it (inputs, then weights)."""
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        output = tf.cast(call(layer, *inputs), tf.float32)
        projection = tf.sin(tf.reshape(tf.range(tf.size(output), dtype=tf.float32), output.shape))
        loss = tf.reduce_sum(output * projection)
    grads = tape.gradient(loss, [*inputs, *layer.trainable_weights])
    return [output.numpy(), *[g.numpy() for g in grads if g is not None]]


def _assert_same(fast_results, plain_results, atol=1e-5):
    assert len(fast_results) == len(plain_results)
    for a, b in zip(fast_results, plain_results):
        np.testing.assert_allclose(a, b, atol=atol, rtol=1e-5)


def test_attention_equation_1_additive_mask_equals_where_mask():
    rng = np.random.default_rng(0)
    q, k, v = (tf.constant(rng.normal(size=(2, 3, 5, 4)), tf.float32) for _ in range(3))
    mask = tf.constant(rng.random((2, 1, 5, 5)) > 0.4) | tf.eye(5, dtype=tf.bool)[None, None]
    fast, fast_weights = attention(q, k, v, mask, fast=True)
    plain, plain_weights = attention(q, k, v, mask, fast=False)
    np.testing.assert_allclose(fast, plain, atol=1e-6)
    np.testing.assert_array_equal(fast_weights.numpy() == 0, ~np.broadcast_to(mask, (2, 3, 5, 5)))
    np.testing.assert_allclose(fast_weights, plain_weights, atol=1e-7)


@pytest.mark.parametrize("self_attention", [True, False])
def test_multi_head_attention_fast_equals_einsum_form(self_attention):
    rng = np.random.default_rng(1)
    query = tf.constant(rng.normal(size=(2, 5, 16)), tf.float32)
    value = query if self_attention else tf.constant(rng.normal(size=(2, 7, 16)), tf.float32)
    mask = np.ones((2, 5, value.shape[1]), bool)
    mask[1, :, -2:] = False
    layers = [
        kt_layers.MultiHeadAttention(4, fast=fast, bias_initializer="random_normal")
        for fast in (True, False)
    ]
    layers[0](query, value)
    layers[1](query, value)
    layers[1].set_weights(layers[0].get_weights())
    results = []
    for layer in layers:
        call = lambda layer, q, v: layer(
            q, q if self_attention else v, attention_mask=mask, use_causal_mask=self_attention
        )
        results.append(_values_and_gradients(layer, [query, value], call))
    _assert_same(*results)


def test_feed_forward_fast_equals_dense_layers():
    x = tf.constant(np.random.default_rng(2).normal(size=(3, 4, 8)), tf.float32)
    layers = [kt_layers.PositionwiseFeedForward(32, fast=fast) for fast in (True, False)]
    for layer in layers:
        layer(x)
    layers[1].set_weights(layers[0].get_weights())
    results = [_values_and_gradients(layer, [x], lambda layer, x: layer(x)) for layer in layers]
    _assert_same(*results)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_blocks_fast_equal_plain_without_dropout(norm):
    rng = np.random.default_rng(3)
    x = tf.constant(rng.normal(size=(2, 5, 16)), tf.float32)
    memory = tf.constant(rng.normal(size=(2, 6, 16)), tf.float32)
    padding = tf.constant([[True] * 6, [True] * 4 + [False] * 2])
    for block_class, call in (
        (kt_layers.EncoderBlock, lambda block, x, m: block(x, padding_mask=padding[:, :5])),
        (kt_layers.DecoderBlock, lambda block, x, m: block(x, m, encoder_padding_mask=padding)),
    ):
        blocks = [
            block_class(num_heads=4, d_ff=32, dropout=0.0, norm=norm, fast=fast)
            for fast in (True, False)
        ]
        for block in blocks:
            call(block, x, memory)
        blocks[1].set_weights(blocks[0].get_weights())
        results = [_values_and_gradients(block, [x, memory], call) for block in blocks]
        _assert_same(*results, atol=2e-5)


def test_whole_model_fast_equals_plain_and_trains_the_same():
    """Figure 1 end to end: same logits and the same weights after a few SGD steps."""
    keras.utils.set_random_seed(0)
    config = TransformerConfig.tiny(40, dropout=0.0)
    fast = build_transformer(config)
    plain = build_transformer(TransformerConfig.tiny(40, dropout=0.0, fast_kernels=False))
    plain.set_weights(fast.get_weights())
    rng = np.random.default_rng(4)
    inputs = {
        "source": rng.integers(4, 40, (4, 7)).astype("int32"),
        "target": rng.integers(4, 40, (4, 6)).astype("int32"),
    }
    inputs["source"][1, 5:] = 0
    labels = rng.integers(4, 40, (4, 6)).astype("int32")
    np.testing.assert_allclose(fast(inputs), plain(inputs), atol=1e-5)
    for model in (fast, plain):
        model.compile(
            optimizer=keras.optimizers.SGD(0.1),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        for _ in range(3):
            model.train_on_batch(inputs, labels)
    for a, b in zip(fast.get_weights(), plain.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert not np.allclose(fast(inputs), build_transformer(config)(inputs), atol=1e-3)


def test_plain_model_uses_the_stock_keras_layers():
    model = build_transformer(TransformerConfig.tiny(40, fast_kernels=False))
    from keras_transformer.model import TransformerLayers

    layers = TransformerLayers.of(model)
    block = layers.decoder_blocks[0]
    assert type(block._dropout) is keras.layers.Dropout
    assert type(block.feed_forward_norm) is keras.layers.LayerNormalization
    assert type(layers.encoder_dropout) is keras.layers.Dropout
    assert not block.self_attention.fast and not block.feed_forward.fast
