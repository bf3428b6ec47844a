"""The whole model against an independent numpy Transformer written from the paper (section 3).

The reference below knows nothing of the library's code: it reads the weights through the public
``TransformerLayers.of(model)`` attributes (never layer names) and computes, in float64,

* embeddings times sqrt(d_model) (3.4) plus sinusoidal (3.5) or learned positional encodings;
* N encoder layers: self-attention, then the feed-forward network (3.1, 3.3), each sub-layer
  wrapped as LayerNorm(x + Sublayer(x)) ("post", 3.1) or x + Sublayer(LayerNorm(x)) ("pre", with
  a final LayerNorm after the stack);
* N decoder layers: causally masked self-attention (3.2.3), attention over the encoder output with
  padded source tokens hidden, then the feed-forward network;
* multi-head attention (3.2.2) head by head with equation (1), heads concatenated, times W^O;
* the pre-softmax projection with the target embedding matrix (3.4).

Tolerance (float32 model against the float64 reference): ``|model - reference| <= 1e-5 +
1e-5 |reference|`` at every real position, for logits of magnitude up to about 4. Measured on
2026-12-01 (this CPU): at most 1.2e-6 over the 16 variants, float32 rounding through 2 + 2 layers.

Teeth: ``test_a_broken_model_fails_the_comparison`` breaks the model one way at a time with
``monkeypatch`` (no library code edited) and asserts that the comparison then fails. Measured
largest logit errors, fast and plain kernels alike: residual connections dropped 5.05; LayerNorm
moved to the pre-norm place 5.31; no sqrt(d_model) scaling 1.86; no causal mask 0.30; padded source
tokens attended 0.36: all four orders of magnitude above the tolerance.
"""

import importlib
import math

import keras
import numpy as np
import pytest

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.layers import blocks as blocks_module
from keras_transformer.model import TransformerLayers, model_dims

SOURCE_VOCAB, TARGET_VOCAB = 23, 29
RTOL = ATOL = 1e-5

# A padded batch: sentence 2 of the source and sentence 1 of the target end in padding (id 0).
SOURCE = np.array([[5, 6, 7, 8, 9, 3], [10, 11, 3, 0, 0, 0], [12, 13, 14, 15, 3, 0]], np.int32)
TARGET = np.array([[2, 16, 17, 0, 0], [2, 18, 19, 20, 21], [2, 22, 4, 5, 0]], np.int32)


# ----------------------------------------------------------------------------- the reference
def _np(variable):
    return np.asarray(keras.ops.convert_to_numpy(variable), np.float64)


def layer_norm(x, norm, epsilon):
    """Ba et al. 2016 over the last axis, with the layer's gain and bias."""
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * _np(norm.gamma) + _np(norm.beta)


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def scaled_dot_product(q, k, v, allowed):
    """Equation (1): softmax(Q K^T / sqrt(d_k)) V; ``allowed`` [q_len, k_len] is True = attend."""
    scores = q @ k.T / math.sqrt(q.shape[-1])
    return softmax(np.where(allowed, scores, -np.inf)) @ v


def multi_head(layer, queries, keys_values, allowed):
    """Section 3.2.2 for one sentence: head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V), then
    Concat(head_1 .. head_h) W^O. Kernels are [d_model, h, d_k], W^O is [h, d_k, d_model]."""
    w = {
        name: (_np(getattr(layer, f"{name}_kernel")), _np(getattr(layer, f"{name}_bias")))
        for name in ("query", "key", "value")
    }
    heads = []
    for i in range(w["query"][0].shape[1]):
        q, k, v = (
            x @ w[name][0][:, i, :] + w[name][1][i]
            for name, x in (("query", queries), ("key", keys_values), ("value", keys_values))
        )
        heads.append(scaled_dot_product(q, k, v, allowed))
    output_kernel = _np(layer.output_kernel)
    w_o = output_kernel.reshape(-1, output_kernel.shape[-1])  # rows: head 1's d_k, head 2's, ...
    return np.concatenate(heads, axis=-1) @ w_o + _np(layer.output_bias)


def feed_forward(ffn, x):
    """Equation (2): max(0, x W1 + b1) W2 + b2."""
    hidden = np.maximum(0.0, x @ _np(ffn.inner.kernel) + _np(ffn.inner.bias))
    return hidden @ _np(ffn.outer.kernel) + _np(ffn.outer.bias)


def sublayer(x, function, norm, config):
    """Section 3.1 (post): LayerNorm(x + Sublayer(x)); pre: x + Sublayer(LayerNorm(x))."""
    if config.norm == "pre":
        return x + function(layer_norm(x, norm, config.layer_norm_epsilon))
    return layer_norm(x + function(x), norm, config.layer_norm_epsilon)


def sinusoids(length, d_model):
    """Section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(same)."""
    table = np.zeros((length, d_model))
    for pos in range(length):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            table[pos, 2 * i], table[pos, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return table


def embed(ids, embedding, positional, config):
    """Section 3.4: E[ids] * sqrt(d_model), plus the positional encodings of section 3.5."""
    vectors = _np(embedding.embeddings)[ids] * math.sqrt(config.d_model)
    if config.positional == "learned":
        return vectors + _np(positional.position_embeddings)[: len(ids)]
    return vectors + sinusoids(len(ids), config.d_model)


def attention_sublayer(x, attention, keys_values, allowed, norm, config):
    """A residual attention sub-layer; ``keys_values=None``: self-attention."""
    attend = lambda y: multi_head(attention, y, y if keys_values is None else keys_values, allowed)
    return sublayer(x, attend, norm, config)


def feed_forward_sublayer(x, block, config):
    return sublayer(
        x, lambda y: feed_forward(block.feed_forward, y), block.feed_forward_norm, config
    )


def encode_sentence(layers, config, source):
    """The encoder stack on one sentence: memory [S, d_model]."""
    allowed = np.broadcast_to((source != 0)[None, :], (len(source),) * 2)  # padded keys hidden
    x = embed(source, layers.source_embedding, layers.encoder_positional, config)
    for block in layers.encoder_blocks:
        x = attention_sublayer(
            x, block.self_attention, None, allowed, block.self_attention_norm, config
        )
        x = feed_forward_sublayer(x, block, config)
    if config.norm == "pre":
        x = layer_norm(x, layers.encoder_norm, config.layer_norm_epsilon)
    return x


def decode_sentence(layers, config, target, memory, source):
    """The decoder stack and the pre-softmax projection on one sentence: logits [T, vocab]."""
    causal = np.tril(np.ones((len(target), len(target)), bool))  # position i sees 0..i
    cross = np.broadcast_to((source != 0)[None, :], (len(target), len(source)))
    y = embed(target, layers.target_embedding, layers.decoder_positional, config)
    for block in layers.decoder_blocks:
        y = attention_sublayer(
            y, block.self_attention, None, causal, block.self_attention_norm, config
        )
        y = attention_sublayer(
            y, block.cross_attention, memory, cross, block.cross_attention_norm, config
        )
        y = feed_forward_sublayer(y, block, config)
    if config.norm == "pre":
        y = layer_norm(y, layers.decoder_norm, config.layer_norm_epsilon)
    return y @ _np(layers.target_embedding.embeddings).T  # tied projection (section 3.4)


def reference_logits(model, config, source, target):
    """``(memory [B, S, d], logits [B, T, V])``: the numpy Transformer with ``model``'s weights."""
    layers = TransformerLayers.of(model)
    memories, logits = [], []
    for s, t in zip(source, target):
        memories.append(encode_sentence(layers, config, s))
        logits.append(decode_sentence(layers, config, t, memories[-1], s))
    return np.stack(memories), np.stack(logits)


# ----------------------------------------------------------------------------- the model
VARIANTS = [
    dict(norm=norm, shared_embeddings=shared, positional=positional, fast_kernels=fast)
    for norm in ("post", "pre")
    for shared in (True, False)
    for positional in ("sinusoidal", "learned")
    for fast in (True, False)
]


def _variant_id(variant):
    return "-".join(
        [
            variant["norm"],
            "shared" if variant["shared_embeddings"] else "separate",
            variant["positional"],
            "fast" if variant["fast_kernels"] else "plain",
        ]
    )


def tiny_model(**variant):
    """A 2 + 2 layer model with random biases, LayerNorm gains and offsets (so that a dropped
    bias or a swapped gain shows) and dropout on (switched off at inference, as it must be)."""
    target_vocab = SOURCE_VOCAB if variant.get("shared_embeddings", True) else TARGET_VOCAB
    config = TransformerConfig.tiny(
        SOURCE_VOCAB,
        target_vocab_size=target_vocab,
        d_model=16,
        num_heads=4,
        d_ff=24,
        max_positions=12,
        dropout=0.3,
        attention_dropout=0.3,
        **variant,
    )
    keras.utils.set_random_seed(7)
    model = build_transformer(config)
    rng = np.random.default_rng(7)
    for weight in model.weights:
        if weight.path.endswith(("bias", "beta")):
            weight.assign(rng.normal(scale=0.2, size=weight.shape))
        elif weight.path.endswith("gamma"):
            weight.assign(1.0 + rng.normal(scale=0.2, size=weight.shape))
    return model, config


def compare(model, config):
    """Asserts the model's memory and logits equal the reference's (real positions only)."""
    expected_memory, expected = reference_logits(model, config, SOURCE, TARGET)
    layers = TransformerLayers.of(model)
    memory, _ = layers.encode(SOURCE, training=False)
    real_source, real_target = SOURCE != 0, TARGET != 0
    np.testing.assert_allclose(
        np.asarray(memory)[real_source], expected_memory[real_source], rtol=RTOL, atol=ATOL
    )
    logits = np.asarray(model({"source": SOURCE, "target": TARGET}, training=False))
    np.testing.assert_allclose(logits[real_target], expected[real_target], rtol=RTOL, atol=ATOL)
    return np.abs(logits - expected)[real_target].max()


@pytest.mark.parametrize("variant", VARIANTS, ids=_variant_id)
def test_the_model_computes_the_papers_transformer(variant):
    model, config = tiny_model(**variant)
    dims = model_dims(model)
    assert (dims["positional"], dims["target_vocab_size"]) == (
        config.positional,
        config.target_vocab_size,
    )
    assert compare(model, config) < 1e-4


def test_the_reference_writes_the_sinusoids_of_section_3_5():
    table = sinusoids(3, 4)
    np.testing.assert_allclose(table[0], [0.0, 1.0, 0.0, 1.0])
    np.testing.assert_allclose(table[2], [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)])


# ----------------------------------------------------------------------------- teeth
def _no_residual(self, x, sublayer, norm_layer, training):
    """The sub-layer wrapper with the residual connection dropped."""
    output, extra = sublayer(norm_layer(x) if self.norm == "pre" else x)
    return (output if self.norm == "pre" else norm_layer(output)), extra


def _drop_residual(monkeypatch, layers):
    # The blocks' one residual wrapper; if it is renamed, follow it here (setattr raises).
    monkeypatch.setattr(blocks_module._Sublayers, "_residual", _no_residual)


def _move_layer_norm(monkeypatch, layers):
    for block in (*layers.encoder_blocks, *layers.decoder_blocks):  # post-norm blocks run "pre"
        monkeypatch.setattr(block, "norm", "pre")


def _unscaled_embeddings(monkeypatch, layers):
    monkeypatch.setattr(layers.source_embedding, "scale", False)


def _no_causal_mask(monkeypatch, layers):
    # The module, not the function that keras_transformer.layers exports under the same name.
    attention = importlib.import_module("keras_transformer.layers.attention")
    monkeypatch.setattr(
        attention, "causal_mask", lambda q, k, offset=0: keras.ops.ones((q, k), "bool")
    )


def _attend_to_source_padding(monkeypatch, layers):
    monkeypatch.setattr(blocks_module, "_key_mask", lambda padding_mask: None)


MUTATIONS = [
    _drop_residual,
    _move_layer_norm,
    _unscaled_embeddings,
    _no_causal_mask,
    _attend_to_source_padding,
]


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "plain"])
@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda f: f.__name__.strip("_"))
def test_a_broken_model_fails_the_comparison(monkeypatch, mutation, fast):
    """The comparison has teeth: each way of breaking Figure 1 makes it fail."""
    model, config = tiny_model(norm="post", fast_kernels=fast)
    assert compare(model, config) < 1e-4
    mutation(monkeypatch, TransformerLayers.of(model))
    with pytest.raises(AssertionError, match="Not equal to tolerance"):
        compare(model, config)
