"""The functional model: parameter counts, causality, padding, saving, mixed precision."""

import pathlib

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.model import TransformerLayers, attention_weights, cast_model, model_dims


@pytest.fixture(scope="module")
def tiny_model():
    keras.utils.set_random_seed(0)
    return build_transformer(TransformerConfig.tiny(50, dropout=0.1))


def _ids(shape, seed=0, vocab=50):
    return np.random.default_rng(seed).integers(4, vocab, size=shape).astype("int32")


@pytest.mark.parametrize("preset, low, high", [("base", 63e6, 65e6), ("big", 212e6, 215e6)])
def test_parameter_counts_match_the_paper(preset, low, high):
    # Paper, Table 3: base 65M and big 213M parameters (shared 37k vocabulary).
    model = build_transformer(TransformerConfig.preset(preset, 37000))
    assert low <= model.count_params() <= high


def test_inputs_outputs_and_variable_lengths(tiny_model):
    signature = {name: (tuple(t.shape), t.dtype) for name, t in tiny_model.input.items()}
    assert signature == {"source": ((None, None), "int32"), "target": ((None, None), "int32")}
    assert [i.name for i in tiny_model.inputs] == ["source", "target"]
    assert tuple(tiny_model.output.shape) == (None, None, 50)
    layers = TransformerLayers.of(tiny_model)
    for s_len, t_len in [(3, 9), (11, 2)]:
        source, target = _ids((2, s_len)), _ids((2, t_len), 1)
        logits = tiny_model({"source": source, "target": target})
        assert logits.shape == (2, t_len, 50) and logits.dtype == tf.float32
        # The inputs go where their names say: the same as encoding source, decoding target.
        memory, mask = layers.encode(source)
        np.testing.assert_allclose(logits, layers.decode(target, memory, mask), atol=1e-5)
        other = tiny_model({"source": _ids((2, s_len), 2), "target": target})
        assert np.abs(np.asarray(other) - np.asarray(logits)).max() > 1e-3  # the source matters


def test_changing_a_target_token_never_changes_earlier_logits(tiny_model):
    source, target = _ids((2, 8)), _ids((2, 10), 1)
    base = tiny_model({"source": source, "target": target}).numpy()
    for j in (0, 4, 9):
        changed = target.copy()
        changed[:, j] = (changed[:, j] + 7) % 46 + 4
        logits = tiny_model({"source": source, "target": changed}).numpy()
        np.testing.assert_allclose(logits[:, :j], base[:, :j], atol=1e-5)
        assert not np.allclose(logits[:, j:], base[:, j:], atol=1e-5)


def test_padding_the_source_or_target_leaves_real_positions_unchanged(tiny_model):
    source, target = _ids((2, 6)), _ids((2, 5), 1)
    base = tiny_model({"source": source, "target": target}).numpy()
    padded_source = np.pad(source, [(0, 0), (0, 4)])
    padded_target = np.pad(target, [(0, 0), (0, 3)])
    logits = tiny_model({"source": padded_source, "target": padded_target}).numpy()
    np.testing.assert_allclose(logits[:, :5], base, atol=1e-5)


def test_shared_embedding_is_one_variable_used_three_ways():
    model = build_transformer(TransformerConfig.tiny(40, dropout=0.0))
    embeddings = [w for w in model.weights if "embedding" in w.path]
    assert len(embeddings) == 1
    table = embeddings[0]
    before = table.numpy().copy()
    source, target = _ids((2, 5), vocab=20), _ids((2, 4), 1, vocab=20)
    labels = _ids((2, 4), 2, vocab=40)
    # Ids >= 20 never appear as inputs, so their rows change only through the output projection.
    model.compile(
        optimizer=keras.optimizers.SGD(0.5),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.train_on_batch({"source": source, "target": target}, labels)
    changed = np.abs(table.numpy() - before).max(axis=1) > 0
    assert changed[20:].any(), "the pre-softmax projection did not update the shared matrix"
    assert changed[np.unique(source)].all(), "the input embedding did not update the shared matrix"


def test_separate_vocabularies_and_pre_norm_learned_positions():
    config = TransformerConfig.tiny(
        30, target_vocab_size=45, shared_embeddings=False, norm="pre", positional="learned"
    )
    model = build_transformer(config)
    logits = model({"source": _ids((2, 4), vocab=30), "target": _ids((2, 3), vocab=45)})
    assert logits.shape == (2, 3, 45)
    names = {layer.name for layer in model.layers}
    assert {"source_embedding", "target_embedding", "encoder_norm", "decoder_norm"} <= names


def test_keras_save_and_load_round_trip_in_safe_mode(tiny_model, tmp_path):
    path = tmp_path / "model.keras"
    tiny_model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    inputs = {"source": _ids((3, 7)), "target": _ids((3, 4), 1)}
    np.testing.assert_allclose(loaded(inputs), tiny_model(inputs), atol=1e-6)


def test_mixed_precision_keeps_logits_float32():
    """Under mixed_bfloat16 the blocks compute in bfloat16 and the logits stay float32, close to
    those of the float32 model with the same weights (bfloat16 keeps 8 bits of mantissa)."""
    exact_model = build_transformer(TransformerConfig.tiny(50))
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = build_transformer(TransformerConfig.tiny(50))
        model.set_weights(exact_model.get_weights())
        inputs = {"source": _ids((2, 5)), "target": _ids((2, 3))}
        logits = model(inputs)
        assert logits.dtype == tf.float32
        assert TransformerLayers.of(model).encoder_blocks[0].compute_dtype == "bfloat16"
    finally:
        keras.mixed_precision.set_global_policy("float32")
    exact = exact_model(inputs).numpy()
    np.testing.assert_allclose(logits.numpy(), exact, atol=0.05 * np.abs(exact).max())
    assert not np.array_equal(logits.numpy(), exact)  # really computed in bfloat16


@pytest.fixture(scope="module")
def value_dim_model():
    """d_k = 4 and d_v = 12 (Table 3 row B as the paper defines it: d_v stays)."""
    keras.utils.set_random_seed(1)
    return build_transformer(TransformerConfig.tiny(50, dropout=0.1, key_dim=4, value_dim=12))


@pytest.mark.parametrize("append", [False, True])
@pytest.mark.parametrize("sizes", ["d_k = d_v", "d_k != d_v"])
def test_cached_step_by_step_decoding_equals_the_full_decoder(
    tiny_model, value_dim_model, append, sizes
):
    model = tiny_model if sizes == "d_k = d_v" else value_dim_model
    layers = TransformerLayers.of(model)
    source, target = _ids((2, 6)), _ids((2, 5), 1)
    full = model({"source": source, "target": target}).numpy()
    memory, mask = layers.encode(source)
    cache = layers.start_cache(memory, mask, length=0 if append else 5)
    steps = []
    for i in range(5):
        logits, cache = layers.decode_step(target[:, i : i + 1], cache, None if append else i)
        steps.append(logits.numpy())
    np.testing.assert_allclose(np.concatenate(steps, 1), full, atol=1e-5)
    keys, values = cache.self_attention[0]
    d_k, d_v = (8, 8) if sizes == "d_k = d_v" else (4, 12)
    assert keys.shape == (2, 4, 5, d_k) and values.shape == (2, 4, 5, d_v)  # [b, h, pos, d]


def test_fused_projections_computed_once_equal_the_per_step_concatenation(tiny_model):
    """start_cache concatenates each self-attention's Q/K/V kernels once; steps that use them
    give exactly the logits of steps that concatenate them again (a cache without them)."""
    layers = TransformerLayers.of(tiny_model)
    source, target = _ids((2, 6)), _ids((2, 4), 1)
    memory, mask = layers.encode(source)
    with_fused = layers.start_cache(memory, mask)
    kernel, bias = with_fused.projections[0]
    attention = layers.decoder_blocks[0].self_attention
    d_model, width = attention.d_model, attention.num_heads * attention.key_dim
    assert kernel.shape == (d_model, 3 * width) and bias.shape == (3 * width,)
    np.testing.assert_array_equal(
        kernel.numpy()[:, width : 2 * width],
        attention.key_kernel.numpy().reshape(d_model, width),
    )
    per_step = with_fused._replace(projections=())
    for i in range(4):
        fused_logits, with_fused = layers.decode_step(target[:, i : i + 1], with_fused)
        step_logits, per_step = layers.decode_step(target[:, i : i + 1], per_step)
        np.testing.assert_array_equal(fused_logits.numpy(), step_logits.numpy())
    assert len(layers.start_cache(memory, mask).projections) == len(layers.decoder_blocks)


def test_cached_beam_rows_repeat_each_sentence(tiny_model):
    """start_cache(repeat=k): row b * k + j decodes sentence b, as beam search needs."""
    layers = TransformerLayers.of(tiny_model)
    source, target = _ids((2, 6)), _ids((2, 1), 1)
    memory, mask = layers.encode(source)
    single, _ = layers.decode_step(target, layers.start_cache(memory, mask))
    repeated, _ = layers.decode_step(
        np.repeat(target, 3, axis=0), layers.start_cache(memory, mask, repeat=3)
    )
    np.testing.assert_allclose(repeated.numpy(), np.repeat(single.numpy(), 3, axis=0), atol=1e-6)
    shared_cache = layers.start_cache(memory, mask, repeat=3, share_cross=True)
    assert shared_cache.cross_attention[0][0].shape[0] == 2  # one copy per sentence
    assert shared_cache.self_attention[0][0].shape[0] == 6  # one row per hypothesis
    shared, _ = layers.decode_step(np.repeat(target, 3, axis=0), shared_cache, beams=3)
    np.testing.assert_allclose(shared.numpy(), repeated.numpy(), atol=1e-6)


def test_model_dims_describe_the_model():
    config = TransformerConfig.tiny(
        30, target_vocab_size=45, shared_embeddings=False, positional="learned", max_positions=20
    )
    dims = model_dims(build_transformer(config))
    assert (dims["d_model"], dims["num_layers"], dims["num_heads"], dims["key_dim"]) == (
        config.d_model,
        config.num_layers,
        config.num_heads,
        config.d_model // config.num_heads,
    )
    assert (dims["source_vocab_size"], dims["target_vocab_size"]) == (30, 45)
    assert dims["max_positions"] == dims["max_source_positions"] == 20
    assert dims["compute_dtype"] == "float32"
    assert dims["attention_window"] is None  # full self-attention unless configured
    local = model_dims(build_transformer(TransformerConfig.tiny(30, key_dim=5, attention_window=3)))
    assert (local["key_dim"], local["attention_window"], local["d_model"]) == (5, 3, 32)
    assert dims["value_dim"] == dims["key_dim"] and local["value_dim"] == 5  # d_v = d_k
    narrow = model_dims(build_transformer(TransformerConfig.tiny(30, key_dim=2, value_dim=8)))
    assert (narrow["key_dim"], narrow["value_dim"]) == (2, 8)


@pytest.mark.parametrize("name", ["v0_tiny_shared", "v0_tiny_learned_prenorm"])
def test_keras_files_written_before_the_refactor_load_and_compute_the_same(name):
    """Files saved by the code before the one-definition layout (SharedEmbedding, max_length)."""
    data = pathlib.Path(__file__).parent / "data"
    model = keras.models.load_model(data / f"{name}.keras", safe_mode=True)
    source = np.array([[5, 6, 7, 3], [8, 9, 3, 0]], np.int32)
    target = np.array([[2, 11, 12], [2, 13, 0]], np.int32)
    expected = np.load(data / f"{name}_logits.npy")
    np.testing.assert_allclose(model({"source": source, "target": target}), expected, atol=1e-5)
    layers = TransformerLayers.of(model)
    memory, mask = layers.encode(source)
    np.testing.assert_allclose(layers.decode(target, memory, mask), expected, atol=1e-5)


def test_attention_weights_are_causal_and_normalised(tiny_model):
    source = np.pad(_ids((1, 5)), [(0, 0), (0, 2)])
    weights = attention_weights(tiny_model, source, _ids((1, 6), 1))
    assert weights["decoder_self"].shape == (2, 1, 4, 6, 6)
    upper = np.triu(np.ones((6, 6), bool), k=1)
    assert np.all(weights["decoder_self"][..., upper] == 0)
    for key in weights:
        np.testing.assert_allclose(weights[key].sum(-1), 1.0, atol=1e-5)
    assert np.all(weights["decoder_cross"][..., 5:] == 0)  # padded source tokens


def test_cast_model_computes_in_bfloat16_and_round_trips(tiny_model, tmp_path):
    fast = cast_model(tiny_model, "bfloat16")
    block = TransformerLayers.of(fast).decoder_blocks[0]
    assert block.compute_dtype == block.self_attention.compute_dtype == "bfloat16"
    assert block.self_attention.query_kernel.dtype == "bfloat16"
    inputs = {"source": _ids((2, 6)), "target": _ids((2, 5), 1)}
    exact, approx = tiny_model(inputs).numpy(), fast(inputs)
    assert approx.dtype == "float32"  # logits stay float32
    np.testing.assert_allclose(approx.numpy(), exact, atol=0.05 * np.abs(exact).max())
    assert not np.array_equal(approx.numpy(), exact)  # really computed in bfloat16
    fast.save(tmp_path / "fast.keras")
    np.testing.assert_array_equal(keras.models.load_model(tmp_path / "fast.keras")(inputs), approx)
    back = cast_model(fast, "float32")
    assert (
        TransformerLayers.of(back).decoder_blocks[0].self_attention.query_kernel.dtype == "float32"
    )


def test_a_mixed_precision_model_loads_and_runs_under_the_float32_policy(tmp_path):
    """Sub-layers (dropout included) follow their block's policy, not the global one at load."""
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = build_transformer(TransformerConfig.tiny(vocab_size=50))
        model.save(tmp_path / "mixed.keras")
    finally:
        keras.mixed_precision.set_global_policy("float32")
    loaded = keras.models.load_model(tmp_path / "mixed.keras")
    inputs = {"source": _ids((2, 6)), "target": _ids((2, 5), 1)}
    np.testing.assert_array_equal(loaded(inputs).numpy(), model(inputs).numpy())


@pytest.mark.parametrize(
    "variant", [{}, {"shared_embeddings": False, "norm": "pre", "positional": "learned"}]
)
def test_export_weights_hold_every_weight_of_the_model_once(variant):
    """The converters' accessor (``TransformerLayers.export_weights``) reaches every weight of
    the model, and only those: a layer added to Figure 1 without it would be left out of the
    CTranslate2 export."""
    model = build_transformer(TransformerConfig.tiny(40, **variant))
    found = [
        v
        for v in tf.nest.flatten(TransformerLayers.of(model).export_weights())
        if isinstance(v, keras.Variable)
    ]
    ids = [id(v) for v in found]
    shared = len(ids) - len(set(ids))  # the tied embedding, named as source and target
    assert shared == (1 if variant.get("shared_embeddings", True) else 0)
    assert {id(v) for v in model.weights} == set(ids)
