"""Layers against the paper's equations, Keras' own attention, and config round trips."""

import math
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import layers as kt_layers
from tests import test_reference_numpy as reference


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _numpy_multihead(layer, query, value, mask=None):
    """Section 3.2.2 written out in numpy from the layer's weights."""
    w = {v.path.split("/")[-1]: v.numpy() for v in layer.weights}
    q = np.einsum("btd,dhk->bthk", query, w["query_kernel"]) + w["query_bias"]
    k = np.einsum("btd,dhk->bthk", value, w["key_kernel"]) + w["key_bias"]
    v = np.einsum("btd,dhk->bthk", value, w["value_kernel"]) + w["value_bias"]
    d_k = q.shape[-1]
    scores = np.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d_k)
    if mask is not None:
        scores = np.where(mask[:, None], scores, -np.inf)
    weights = _softmax(scores)
    heads = np.einsum("bhqk,bkhd->bqhd", weights, v)
    return np.einsum("bqhk,hkd->bqd", heads, w["output_kernel"]) + w["output_bias"], weights


def test_attention_equals_numpy_formula_with_padding_mask():
    rng = np.random.default_rng(0)
    query = rng.normal(size=(2, 4, 16)).astype("float32")
    value = rng.normal(size=(2, 6, 16)).astype("float32")
    mask = np.ones((2, 4, 6), bool)
    mask[1, :, 4:] = False  # last two keys of sentence 2 are padding
    layer = kt_layers.MultiHeadAttention(num_heads=4, bias_initializer="random_normal")
    out, weights = layer.call_with_scores(query, value, attention_mask=mask)
    expected, expected_weights = _numpy_multihead(layer, query, value, mask)
    np.testing.assert_allclose(out, expected, atol=1e-5)
    np.testing.assert_allclose(weights, expected_weights, atol=1e-6)
    assert layer.key_dim == 16 // 4
    assert np.all(weights.numpy()[1, :, :, 4:] == 0.0)
    np.testing.assert_allclose(weights.numpy().sum(-1), 1.0, atol=1e-6)


@pytest.mark.parametrize(
    "key_dim, value_dim, fast",
    [(None, None, True), (None, None, False), (3, 12, True), (3, 12, False), (10, 5, True)],
)
def test_attention_equals_keras_multi_head_attention_with_same_weights(key_dim, value_dim, fast):
    """Keras' layer as the reference, d_k = d_v = d_model / h and (Table 3 row B) d_v != d_k."""
    rng = np.random.default_rng(1)
    # Tensors: self-attention passes one object as query and value (the fused Q/K/V path).
    query = tf.constant(rng.normal(size=(3, 5, 32)), tf.float32)
    value = tf.constant(rng.normal(size=(3, 7, 32)), tf.float32)
    mask = rng.random((3, 5, 7)) > 0.3
    mask[..., 0] = True
    ours = kt_layers.MultiHeadAttention(
        num_heads=4,
        bias_initializer="random_normal",
        key_dim=key_dim,
        value_dim=value_dim,
        fast=fast,
    )
    theirs = keras.layers.MultiHeadAttention(
        num_heads=4, key_dim=key_dim or 8, value_dim=value_dim or key_dim or 8
    )
    ours(query, value)
    theirs(query, value)
    theirs._query_dense.set_weights([ours.query_kernel.numpy(), ours.query_bias.numpy()])
    theirs._key_dense.set_weights([ours.key_kernel.numpy(), ours.key_bias.numpy()])
    theirs._value_dense.set_weights([ours.value_kernel.numpy(), ours.value_bias.numpy()])
    theirs._output_dense.set_weights([ours.output_kernel.numpy(), ours.output_bias.numpy()])
    np.testing.assert_allclose(
        ours(query, value, attention_mask=mask),
        theirs(query, value, attention_mask=mask),
        atol=1e-5,
    )
    np.testing.assert_allclose(
        ours(query, query, use_causal_mask=True),
        theirs(query, query, use_causal_mask=True),
        atol=1e-5,
    )


def test_causal_mask_gives_zero_weight_to_future_positions_with_dropout():
    x = np.random.default_rng(2).normal(size=(2, 6, 16)).astype("float32")
    layer = kt_layers.MultiHeadAttention(num_heads=2, dropout=0.5)
    _, weights = layer.call_with_scores(x, x, use_causal_mask=True, training=True)
    upper = np.triu(np.ones((6, 6), bool), k=1)
    assert np.all(weights.numpy()[:, :, upper] == 0.0)
    assert np.all(weights.numpy()[:, :, ~upper] > 0.0)


@pytest.mark.parametrize("mode", ["preallocated", "append"])
def test_cached_attention_matches_full_causal_attention(mode):
    x = np.random.default_rng(3).normal(size=(2, 5, 16)).astype("float32")
    layer = kt_layers.MultiHeadAttention(num_heads=4)
    full = layer(x, x, use_causal_mask=True).numpy()
    length = 5 if mode == "preallocated" else 0
    cache = (np.zeros((2, 4, length, 4), "float32"),) * 2  # (keys, values): [batch, h, len, d_k]
    steps = []
    # One step, then two positions at once: the causal mask must use the right offset.
    for start, stop in [(0, 1), (1, 3), (3, 4), (4, 5)]:
        if mode == "preallocated":
            out, cache = layer.call_cached(x[:, start:stop], cache, cache_update_index=start)
        else:
            out, cache = layer.call_cached(x[:, start:stop], cache)
            assert [c.shape for c in cache] == [(2, 4, stop, 4)] * 2
        steps.append(out.numpy())
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)


def test_precomputed_keys_and_values_equal_attention_over_the_memory():
    rng = np.random.default_rng(4)
    query, memory = (rng.normal(size=(2, n, 16)).astype("float32") for n in (3, 7))
    layer = kt_layers.MultiHeadAttention(num_heads=4)
    direct = layer(query, memory).numpy()
    keys, values = layer.compute_cache(memory)
    assert keys.shape == values.shape == (2, 4, 7, 4)
    np.testing.assert_allclose(
        layer.call_precomputed(query, (keys, values)).numpy(), direct, atol=1e-5
    )


@pytest.mark.parametrize("fast", [False, True])
def test_precomputed_keys_and_values_shared_by_beams_equal_a_repeated_cache(fast):
    """``beams=g``: g query rows per cache row attend as over a cache repeated g times (the
    source mask too); each query's output differs from the others' (a real grouping)."""
    rng = np.random.default_rng(5)
    query = rng.normal(size=(2 * 3, 2, 16)).astype("float32")  # 2 sentences x 3 beams, 2 steps
    memory = rng.normal(size=(2, 7, 16)).astype("float32")
    mask = np.ones((2, 1, 7), bool)
    mask[1, :, 4:] = False
    layer = kt_layers.MultiHeadAttention(num_heads=4, fast=fast)
    keys, values = layer.compute_cache(memory)
    repeated = [np.repeat(t, 3, axis=0) for t in (keys.numpy(), values.numpy())]
    expected = layer.call_precomputed(query, repeated, np.repeat(mask, 3, axis=0)).numpy()
    shared = layer.call_precomputed(query, (keys, values), mask, beams=3).numpy()
    assert shared.shape == (6, 2, 16)
    np.testing.assert_allclose(shared, expected, atol=1e-5)
    assert np.abs(expected[3] - expected[4]).max() > 1e-2


@pytest.mark.parametrize("d_model", [16, 512])
def test_sinusoidal_encoding_matches_section_3_5(d_model):
    table = kt_layers.sinusoidal_encoding(120, d_model).numpy()
    for pos in (0, 1, 7, 50, 119):
        for i in (0, 1, 3, d_model // 2 - 1):
            angle = pos / 10000 ** (2 * i / d_model)
            assert abs(table[pos, 2 * i] - math.sin(angle)) < 1e-6 * max(1, pos / 10)
            assert abs(table[pos, 2 * i + 1] - math.cos(angle)) < 1e-6 * max(1, pos / 10)


def test_positional_encoding_offset_continues_the_table():
    layer = kt_layers.PositionalEncoding(max_positions=64)
    zeros = np.zeros((1, 3, 8), "float32")
    np.testing.assert_allclose(
        layer(zeros, offset=5)[0], kt_layers.sinusoidal_encoding(8, 8)[5:8], atol=1e-6
    )


def test_learned_positional_encoding_is_a_trainable_table():
    layer = kt_layers.PositionalEncoding(max_positions=10, kind="learned")
    out = layer(np.zeros((2, 4, 8), "float32"), offset=3)
    assert [w.shape for w in layer.trainable_weights] == [(10, 8)]
    np.testing.assert_allclose(out[0], layer.position_embeddings.numpy()[3:7])


def test_shared_embedding_scales_by_sqrt_d_model_and_ties_the_projection():
    layer = kt_layers.TokenEmbedding(vocab_size=11, d_model=16)
    ids = np.array([[1, 2, 3]], "int32")
    vectors = layer(ids)
    table = layer.embeddings.numpy()
    np.testing.assert_allclose(vectors[0], table[[1, 2, 3]] * 4.0, rtol=1e-6)
    logits = layer(vectors, reverse=True)
    np.testing.assert_allclose(logits[0], vectors.numpy()[0] @ table.T, rtol=1e-5, atol=1e-5)
    assert len(layer.weights) == 1


def test_feed_forward_equals_equation_2_with_lora_and_quantized_sublayers():
    """FFN(x) = max(0, x W1 + b1) W2 + b2 at every position, computed by the flattened fast path
    from the ``Dense`` sub-layers' weights (LoRA included); int8-quantized sub-layers run through
    ``Dense`` itself (their kernels are int8 plus a scale)."""
    rng = np.random.default_rng(3)
    ffn = kt_layers.PositionwiseFeedForward(d_ff=12)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    ffn.build(x.shape)
    for weight in ffn.weights:  # non-zero biases, so a dropped bias would show
        weight.assign(rng.normal(size=weight.shape).astype("float32"))

    def equation_2():
        w1, b1, w2, b2 = (
            np.asarray(w)
            for w in (ffn.inner.kernel, ffn.inner.bias, ffn.outer.kernel, ffn.outer.bias)
        )
        return np.maximum(0.0, x @ w1 + b1) @ w2 + b2

    plain, float_weights = equation_2(), ffn.get_weights()
    np.testing.assert_allclose(ffn(x), plain, rtol=1e-5, atol=1e-5)
    ffn.inner.enable_lora(2)
    ffn.inner.lora_kernel_b.assign(np.ones(ffn.inner.lora_kernel_b.shape, "float32"))
    with_lora = equation_2()  # Dense.kernel includes the LoRA update
    assert np.abs(with_lora - plain).max() > 1e-2
    np.testing.assert_allclose(ffn(x), with_lora, rtol=1e-5, atol=1e-5)

    quantized = kt_layers.PositionwiseFeedForward(d_ff=12)
    quantized.build(x.shape)
    quantized.set_weights(float_weights)
    for dense in (quantized.inner, quantized.outer):
        dense.quantize("int8")
    np.testing.assert_allclose(quantized(x), plain, rtol=0.05, atol=0.3)  # int8 rounding only
    assert not quantized._float_kernels()


LAYERS = [
    lambda: kt_layers.MultiHeadAttention(num_heads=4, dropout=0.1, use_bias=False, name="mha"),
    lambda: kt_layers.MultiHeadAttention(
        num_heads=2, key_dim=5, attention_window=3, blocked=False, name="local"
    ),
    lambda: kt_layers.PositionalEncoding(max_positions=33, kind="learned", name="pe"),
    lambda: kt_layers.TokenEmbedding(vocab_size=50, d_model=16, scale=False, name="emb"),
    lambda: kt_layers.SharedEmbedding(vocab_size=50, d_model=16, name="shared"),  # old name
    lambda: kt_layers.PositionwiseFeedForward(d_ff=48, activation="gelu", name="ffn"),
    lambda: kt_layers.EncoderBlock(
        num_heads=4,
        d_ff=48,
        dropout=0.2,
        attention_dropout=0.1,
        norm="pre",
        layer_norm_epsilon=1e-5,
        name="enc",
    ),
    lambda: kt_layers.DecoderBlock(num_heads=2, d_ff=24, dropout=0.0, norm="post", name="dec"),
    lambda: kt_layers.DecoderBlock(
        num_heads=2, d_ff=24, key_dim=3, attention_window=4, name="local_dec"
    ),
    lambda: kt_layers.PaddingMask(padding_id=3, name="pad"),
    lambda: kt_layers.FastDropout(0.3, seed=5, name="drop"),
    lambda: kt_layers.LayerNormalization(epsilon=1e-5, name="norm"),
]


@pytest.mark.parametrize("make", LAYERS)
def test_get_config_from_config_round_trip(make):
    layer = make()
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    # The serialized form names our package, so .keras files find the class in safe mode.
    assert keras.saving.serialize_keras_object(layer)["registered_name"].startswith(
        "keras_transformer>"
    )


def test_blocks_reject_unknown_norm():
    with pytest.raises(ValueError, match="norm='sandwich'"):
        kt_layers.EncoderBlock(num_heads=2, d_ff=8, norm="sandwich")


def test_mixed_bfloat16_attention_runs_softmax_in_float32():
    x = np.random.default_rng(6).normal(size=(2, 4, 8)).astype("float32")
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        layer = kt_layers.MultiHeadAttention(num_heads=2, bias_initializer="random_normal")
        out, weights = layer.call_with_scores(x, x, use_causal_mask=True)
        assert out.dtype == tf.bfloat16 and weights.dtype == tf.float32
    finally:
        keras.mixed_precision.set_global_policy("float32")
    causal = np.broadcast_to(np.tril(np.ones((4, 4), bool)), (2, 4, 4))
    expected, expected_weights = _numpy_multihead(layer, x, x, causal)  # float32 weights
    # A float32 softmax: rows sum to 1 to float32 precision (a bfloat16 one is off by ~1e-3).
    np.testing.assert_allclose(weights.numpy().sum(-1), 1.0, atol=1e-6)
    assert np.all(weights.numpy()[..., ~causal[0]] == 0.0)
    np.testing.assert_allclose(weights.numpy(), expected_weights, atol=2e-2)
    out = np.asarray(tf.cast(out, tf.float32))
    np.testing.assert_allclose(out, expected, atol=0.03 * np.abs(expected).max())


def _randomize(layer, seed):
    """Random biases and LayerNorm gains/offsets, so that a dropped one shows."""
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        if weight.path.endswith(("bias", "beta")):
            weight.assign(rng.normal(scale=0.2, size=weight.shape))
        elif weight.path.endswith("gamma"):
            weight.assign(1.0 + rng.normal(scale=0.2, size=weight.shape))


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "plain"])
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_encoder_and_decoder_blocks_equal_numpy_section_3_1(norm, fast):
    """Each block's sub-layers, residual connections and LayerNorms against the numpy reference
    of tests/test_reference_numpy.py (post: LayerNorm(x + Sublayer(x)); pre: x +
    Sublayer(LayerNorm(x))), with a padded source; dropout is on and must be off at inference."""
    rng = np.random.default_rng(8)
    x, memory = (rng.normal(size=(2, n, 16)).astype("float32") for n in (5, 6))
    padding = np.array([[True] * 6, [True] * 3 + [False] * 3])
    args = dict(num_heads=4, d_ff=24, dropout=0.3, norm=norm, layer_norm_epsilon=1e-5, fast=fast)
    encoder, decoder = kt_layers.EncoderBlock(**args), kt_layers.DecoderBlock(**args)
    encoder.build(memory.shape)
    decoder.build(x.shape, memory.shape)
    _randomize(encoder, 1)
    _randomize(decoder, 2)
    encoded = encoder(memory, padding_mask=padding, training=False).numpy()
    decoded = decoder(x, memory, encoder_padding_mask=padding, training=False).numpy()
    config = types.SimpleNamespace(norm=norm, layer_norm_epsilon=1e-5)
    causal = np.tril(np.ones((5, 5), bool))
    for b in range(2):
        allowed = np.broadcast_to(padding[b][None], (6, 6))
        y = reference.attention_sublayer(
            memory[b], encoder.self_attention, None, allowed, encoder.self_attention_norm, config
        )
        y = reference.feed_forward_sublayer(y, encoder, config)
        np.testing.assert_allclose(encoded[b][padding[b]], y[padding[b]], rtol=1e-5, atol=1e-5)
        z = reference.attention_sublayer(
            x[b], decoder.self_attention, None, causal, decoder.self_attention_norm, config
        )
        cross = np.broadcast_to(padding[b][None], (5, 6))
        z = reference.attention_sublayer(
            z, decoder.cross_attention, memory[b], cross, decoder.cross_attention_norm, config
        )
        z = reference.feed_forward_sublayer(z, decoder, config)
        np.testing.assert_allclose(decoded[b], z, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_layer_normalization_matches_keras_values_and_gradients(dtype):
    """The closed-form gradient equals autodiff through Keras' LayerNormalization, and both equal
    the formulas in float64 to the rounding of one float32 result to ``dtype``."""
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(3, 5, 16)) * 4 + 1, dtype=dtype)
    upstream = tf.constant(rng.normal(size=(3, 5, 16)), dtype=dtype)
    ours = kt_layers.LayerNormalization(epsilon=1e-6, dtype=dtype)
    reference = keras.layers.LayerNormalization(epsilon=1e-6, dtype=dtype)
    for layer in (ours, reference):
        layer.build(x.shape)
    weights = [rng.normal(size=16).astype("float32") + 1, rng.normal(size=16).astype("float32")]
    for layer in (ours, reference):  # non-trivial gamma and beta
        layer.set_weights(weights)
    results = []
    for layer in (ours, reference):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x)
            loss = tf.reduce_sum(tf.cast(y * upstream, "float32"))
        grads = tape.gradient(loss, [x, layer.gamma, layer.beta])
        assert y.dtype == x.dtype and grads[0].dtype == x.dtype
        results.append([np.asarray(tf.cast(t, "float32")) for t in [y, *grads]])
    # y = x_hat * gamma + beta, dx (the closed form of _layer_norm_tf), dgamma, dbeta in float64
    # from the inputs and weights as the layers hold them (rounded to dtype).
    x64, dy, gamma, beta = (
        np.asarray(tf.cast(t, "float64")) for t in (x, upstream, ours.gamma, ours.beta)
    )
    centred = x64 - x64.mean(-1, keepdims=True)
    inv = 1.0 / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-6)
    x_hat, g = centred * inv, dy * gamma
    dx = inv * (g - g.mean(-1, keepdims=True) - x_hat * (g * x_hat).mean(-1, keepdims=True))
    exact = [x_hat * gamma + beta, dx, (dy * x_hat).sum((0, 1)), dy.sum((0, 1))]
    # Both layers compute in float32 and round each result once to dtype: within half an ulp
    # (relative 2**-8 for bfloat16's 8-bit significand, 2**-24 for float32) of a float32 value
    # whose own error is a few float32 roundings of the tensor's largest entry (sums and means
    # of 15-16 terms: 16 * 2**-24 * max|t|; measured: 2.7 * 2**-24 * max|t| at most). Measured
    # in bfloat16: 0.96 * 2**-8 relative at most, the two layers bit-identical; the old flat
    # 5e-2 let y be 3% off (a variance divided by n - 1 passed it).
    half_ulp = 2.0**-8 if dtype == "bfloat16" else 2.0**-24
    for name, a, b, want in zip(("y", "dx", "dgamma", "dbeta"), *results, exact):
        float32_error = 16 * 2.0**-24 * np.abs(want).max()
        for got in (a, b):
            np.testing.assert_allclose(got, want, rtol=half_ulp, atol=float32_error, err_msg=name)
        # Roundings of two float32 values that close: at most one ulp apart.
        np.testing.assert_allclose(a, b, rtol=2 * half_ulp, atol=2 * float32_error, err_msg=name)
    assert np.abs(results[0][1]).max() > 0.1  # a real input gradient


def test_fast_dropout_keeps_the_rate_scales_and_is_identity_at_inference():
    layer = kt_layers.FastDropout(0.1, seed=3)
    x = tf.ones((200, 500))
    y = layer(x, training=True).numpy()
    dropped = (y == 0).mean()
    assert abs(dropped - 0.1) < 0.005
    np.testing.assert_allclose(np.unique(y), [0.0, 1.0 / 0.9], rtol=1e-6)
    second = layer(x, training=True).numpy()
    assert (second == 0).mean() > 0.09 and ((second == 0) != (y == 0)).any()  # fresh draws
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
    # An odd number of elements and bfloat16 work too; the mask does not depend on the values.
    z = kt_layers.FastDropout(0.1, dtype="bfloat16")(tf.ones((7, 3), "bfloat16"), training=True)
    assert z.dtype == tf.bfloat16 and z.shape == (7, 3)
    assert set(np.unique(np.asarray(tf.cast(z, tf.float32))).tolist()) <= {
        0.0,
        float(tf.cast(tf.constant(1.0 / 0.9, tf.bfloat16), tf.float32)),
    }
    config = layer.get_config()
    assert config["rate"] == 0.1 and type(layer).from_config(config).rate == 0.1


@pytest.mark.filterwarnings("ignore:You passed `rms_scaling=True`:UserWarning")  # on purpose
def test_layer_normalization_and_dropout_fall_back_to_keras_for_other_settings():
    """Settings the fast paths do not cover (another axis, rms_scaling, noise_shape) run Keras."""
    x = tf.random.normal((2, 3, 4), seed=1)
    for kwargs in ({"axis": 1}, {"rms_scaling": True}, {"center": False}):
        ours, reference = (
            kt_layers.LayerNormalization(**kwargs),
            keras.layers.LayerNormalization(**kwargs),
        )
        np.testing.assert_allclose(ours(x), reference(x), rtol=1e-5, atol=1e-5)
    layer = kt_layers.FastDropout(0.5, noise_shape=(2, 1, 4), seed=2)
    y = layer(tf.ones((2, 3, 4)), training=True).numpy()
    assert (y == y[:, :1, :]).all() and set(np.unique(y)) <= {
        0.0,
        2.0,
    }  # one mask per (batch, unit)
