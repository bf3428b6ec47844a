"""Local restricted attention (paper section 4) and the key size d_k (Table 3 row (B)): the
blocked form equals the band mask, and a windowed model trains, decodes with a bounded cache,
saves, loads and exports."""

import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.inference.strategies import length_penalty
from keras_transformer.layers import MultiHeadAttention, attention
from keras_transformer.layers.local_attention import band_mask, blocked_attention, blocked_mask
from keras_transformer.model import TransformerLayers, model_dims
from keras_transformer.text.tokenizer import BOS_ID, PAD_ID
from tests.oracles.reference_decoding import NoEosSearcher

WINDOW = 2


def _ids(shape, seed=0, vocab=40):
    return np.random.default_rng(seed).integers(4, vocab, size=shape).astype("int32")


@pytest.fixture(scope="module")
def window_model():
    """Tiny (N=2, d_model=32, h=4), r=2, d_k=6 (so h * d_k = 24 != d_model) and d_v=10, no
    dropout."""
    keras.utils.set_random_seed(3)
    config = TransformerConfig.tiny(
        40, dropout=0.0, attention_window=WINDOW, key_dim=6, value_dim=10
    )
    return build_transformer(config)


# ---------------------------------------------------------------------- the two forms
@pytest.mark.parametrize(
    "length, window, causal, padded",
    [
        (13, 4, False, True),  # not a multiple of r, padded keys
        (13, 4, True, True),
        (12, 3, False, False),  # a multiple of r
        (9, 2, True, False),
        (5, 8, False, True),  # r >= length: a single block
        (5, 8, True, False),
        (1, 3, False, False),
    ],
)
def test_blocked_equals_the_band_mask_forward_and_gradient(length, window, causal, padded):
    rng = np.random.default_rng(length * 10 + window)
    q, k, v = (tf.constant(rng.normal(size=(2, 3, length, 4)), tf.float32) for _ in range(3))
    key_mask = np.ones((2, length), bool)
    if padded:
        key_mask[1, length - 3 :] = False
    real = key_mask[:, None, :, None].astype("float32")  # compare at real query positions
    weights = tf.constant(rng.normal(size=(2, 3, length, 4)), tf.float32) * real
    mask = band_mask(length, length, window, causal)[None, None] & key_mask[:, None, None, :]

    def outputs(blocked):
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            if blocked:
                out = blocked_attention(q, k, v, window, tf.constant(key_mask), causal)
            else:
                out = attention(q, k, v, mask)[0]  # the reference: full attention, band mask
            loss = tf.reduce_sum(out * weights)
        return [out * real, *tape.gradient(loss, [q, k, v])]

    for got, want in zip(outputs(True), outputs(False)):
        np.testing.assert_allclose(got, want, atol=1e-5)
    if window < length:  # the window really restricts: full attention differs
        full = attention(q, k, v, key_mask[:, None, None, :])[0] * real
        assert np.abs(full - outputs(False)[0]).max() > 1e-3


def test_a_sequence_shorter_than_r_is_one_block_of_its_own_length():
    # n <= r: one block of n queries against 3n (causal 2n) context keys, not r and 3r.
    assert tuple(blocked_mask(5, 8).shape) == (1, 1, 1, 5, 15)
    assert tuple(blocked_mask(5, 8, causal=True).shape) == (1, 1, 1, 5, 10)
    assert tuple(blocked_mask(13, 4).shape) == (1, 1, 4, 4, 12)  # n > r: blocks of r
    run = tf.function(lambda x: blocked_attention(x, x, x, 8))  # a length known at run time
    dynamic = run.get_concrete_function(tf.TensorSpec((1, 2, None, 4)))
    for length in (5, 13):
        q = tf.random.normal((1, 2, length, 4), seed=length)
        np.testing.assert_allclose(dynamic(q), blocked_attention(q, q, q, 8), atol=1e-6)


def test_band_mask_is_distance_r_and_in_the_decoder_the_r_previous_positions():
    both = band_mask(5, 5, 1).numpy()
    np.testing.assert_array_equal(both, np.abs(np.subtract.outer(range(5), range(5))) <= 1)
    causal = band_mask(1, 6, 2, causal=True, offset=4).numpy()  # query at position 4
    np.testing.assert_array_equal(causal, [[False, False, True, True, True, False]])


@pytest.mark.parametrize("causal", [False, True])
def test_the_layer_blocked_and_band_forms_share_weights_and_gradients(causal):
    layers = [
        MultiHeadAttention(4, key_dim=3, attention_window=2, blocked=b) for b in (True, False)
    ]
    x = tf.constant(np.random.default_rng(0).normal(size=(2, 7, 8)), tf.float32)
    mask = np.ones((2, 1, 7), bool)
    mask[0, 0, 5:] = False
    for layer in layers:
        layer.build(x.shape, x.shape)
    layers[1].set_weights(layers[0].get_weights())
    results = []
    for layer in layers:
        with tf.GradientTape() as tape:
            out = layer(x, x, attention_mask=None if causal else mask, use_causal_mask=causal)
            loss = tf.reduce_sum(out[1] ** 2)  # row 1 has no padding
        results.append([out[1], *tape.gradient(loss, layer.trainable_weights)])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, atol=1e-5)
    _, weights = layers[1].call_with_scores(x, x, use_causal_mask=causal)
    outside = ~band_mask(7, 7, 2, causal).numpy()
    assert np.all(weights.numpy()[..., outside] == 0)


def test_key_dim_sets_the_heads_size_apart_from_d_model():
    layer = MultiHeadAttention(num_heads=4, key_dim=6)
    out = layer(tf.zeros((2, 5, 10)), tf.zeros((2, 5, 10)))  # 10 % 4 != 0: fine with key_dim
    assert out.shape == (2, 5, 10) and layer.key_dim == 6
    assert layer.query_kernel.shape == (10, 4, 6) and layer.output_kernel.shape == (4, 6, 10)
    with pytest.raises(ValueError, match="not divisible"):
        MultiHeadAttention(num_heads=4)(tf.zeros((1, 2, 10)), tf.zeros((1, 2, 10)))
    with pytest.raises(ValueError, match="attention_window=0"):
        MultiHeadAttention(num_heads=4, attention_window=0)
    small = build_transformer(TransformerConfig.tiny(40, key_dim=4))  # d_k 8 -> 4
    assert small.count_params() < build_transformer(TransformerConfig.tiny(40)).count_params()


# ---------------------------------------------------------------------- the model
def test_a_window_model_trains_saves_loads_and_sees_only_its_window(tmp_path):
    config = dict(num_layers=1, attention_window=WINDOW, key_dim=6)
    model = build_transformer(TransformerConfig.tiny(40, **config))
    assert (model_dims(model)["attention_window"], model_dims(model)["key_dim"]) == (2, 6)
    source, target = _ids((4, 9)), _ids((4, 10), 1)
    source[1, 6:] = PAD_ID
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    history = model.fit({"source": source, "target": target}, target, epochs=3, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert history.history["loss"][-1] < history.history["loss"][0]
    model.save(tmp_path / "window.keras")
    loaded = keras.models.load_model(tmp_path / "window.keras", safe_mode=True)
    inputs = {"source": source, "target": target}
    np.testing.assert_allclose(loaded(inputs), model(inputs), atol=1e-6)
    assert model_dims(loaded)["attention_window"] == WINDOW
    # The band-mask form (fast_kernels=False) with the same weights: the same logits.
    plain = build_transformer(TransformerConfig.tiny(40, **config, fast_kernels=False))
    plain.set_weights(model.get_weights())
    np.testing.assert_allclose(plain(inputs), model(inputs), atol=1e-5)
    # One decoder layer of r=2: logits at position t depend on target tokens t-2 .. t only.
    changed = target.copy()
    changed[:, 0] = (changed[:, 0] + 5) % 36 + 4
    before, after = model(inputs).numpy(), model({"source": source, "target": changed}).numpy()
    assert not np.allclose(before[:, :3], after[:, :3], atol=1e-5)
    np.testing.assert_allclose(before[:, 3:], after[:, 3:], atol=1e-5)


@pytest.mark.parametrize("preallocated", [False, True])
def test_cached_steps_keep_r_positions_and_equal_the_full_decoder(window_model, preallocated):
    layers = TransformerLayers.of(window_model)
    source, target = _ids((2, 6)), _ids((2, 9), 1)
    full = window_model({"source": source, "target": target}).numpy()
    memory, mask = layers.encode(source)
    cache = layers.start_cache(memory, mask, length=9 if preallocated else 0)
    steps = []
    for i in range(9):
        logits, cache = layers.decode_step(target[:, i : i + 1], cache, i if preallocated else None)
        steps.append(logits.numpy())
        keys, values, positions = cache.self_attention[0]
        assert keys.shape == (2, 4, WINDOW, 6) and values.shape == (2, 4, WINDOW, 10)  # r slots
        np.testing.assert_array_equal(positions[0], [i - 1, i])  # -1: an empty slot
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)


def _uncached_log_probs(model, source, ids):
    """log P(token | source, earlier tokens) of the whole model (no cache), at each of ``ids``,
    and the model's arg-max among the tokens the search may emit."""
    prefix = np.concatenate([np.full((len(ids), 1), BOS_ID, np.int32), ids[:, :-1]], axis=1)
    log_probs = tf.nn.log_softmax(model({"source": source, "target": prefix})).numpy()
    allowed = log_probs.copy()
    allowed[..., list(NoEosSearcher.banned_ids)] = -np.inf
    chosen = np.take_along_axis(log_probs, ids[..., None], axis=-1)[..., 0]
    return chosen, allowed.argmax(-1)


def test_greedy_and_beam_search_equal_the_uncached_model(window_model):
    """Long outputs (never EOS, 12 tokens > r): each greedy token is the uncached model's
    arg-max after the earlier ones, and each score (greedy and beam) the uncached model's
    log-probability of the tokens."""
    source = _ids((3, 5), 7)
    searcher = NoEosSearcher(window_model, beam_size=3, alpha=0.0, max_extra_length=7)
    for search in (searcher.greedy, searcher.beam_search):
        ids, scores = search(tf.constant(source))
        assert ids.shape == (3, 12)
        chosen, arg_max = _uncached_log_probs(window_model, source, ids.numpy())
        if search is searcher.greedy:
            np.testing.assert_array_equal(ids, arg_max)
        lengths = np.full(3, 12)
        np.testing.assert_allclose(scores * length_penalty(lengths, 0.0), chosen.sum(1), atol=1e-4)


def test_ctranslate2_refuses_a_window_or_a_key_size_it_cannot_hold(window_model):
    from keras_transformer.inference.ctranslate2 import ctranslate2_spec

    vocabulary = [f"p{i}" for i in range(40)]
    with pytest.raises(ValueError, match="attention_window=2"):
        ctranslate2_spec(window_model, vocabulary, 16)
    with pytest.raises(ValueError, match="key_dim=4"):
        ctranslate2_spec(build_transformer(TransformerConfig.tiny(40, key_dim=4)), vocabulary, 16)
    narrow_keys = TransformerConfig.tiny(40, key_dim=2, value_dim=8)  # d_v = d_model / h
    with pytest.raises(ValueError, match=r"value_dim=8 and key_dim=2 \(d_v != d_k\)"):
        ctranslate2_spec(build_transformer(narrow_keys), vocabulary, 16)


def test_export_translates_in_a_fresh_process(multi30k_tokenizer, tmp_path):
    from keras_transformer.inference.saved_model import Translator

    keras.utils.set_random_seed(5)
    config = TransformerConfig.tiny(
        multi30k_tokenizer.vocab_size, num_layers=1, dropout=0.0, attention_window=WINDOW
    )
    translator = Translator(
        build_transformer(config), multi30k_tokenizer, beam_size=2, max_extra_length=6
    )
    texts = ["A dog runs on the beach.", "Two men are talking."]
    path = translator.save(tmp_path / "translator")
    expected = translator.translate(tf.constant(texts))  # traced by save already
    script = textwrap.dedent("""
        import json, sys
        import tensorflow as tf
        import tensorflow_text  # registers the SentencePiece ops

        out = tf.saved_model.load(sys.argv[1]).signatures["serving_default"](
            text=tf.constant(json.loads(sys.argv[2])))
        print(json.dumps([t.hex() for t in out["translation"].numpy()]))
    """)
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-c", script, str(path), json.dumps(texts)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got == [t.hex() for t in expected["translation"].numpy()]
    assert all(got)  # non-empty translations
