# Paper section 5.4 (label smoothing, eps_ls = 0.1): tests of the loss and the token metrics.
import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.losses import LabelSmoothedCrossEntropy, token_cross_entropy
from keras_transformer.metrics import MaskedAccuracy, Perplexity, TokenCount

V = 11


def np_log_softmax(logits):
    logits = logits.astype(np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def np_smoothed_loss(labels, logits, eps=0.1, pad=0, sample_weight=None):
    """q = (1 - eps) * onehot(y) + eps / V;  loss_t = -sum_k q_k log p_k;  mean over real tokens."""
    vocab = logits.shape[-1]
    q = (1.0 - eps) * np.eye(vocab)[labels] + eps / vocab
    per_token = -(q * np_log_softmax(logits)).sum(axis=-1)
    real = labels != pad
    weights = real.astype(np.float64)
    if sample_weight is not None:
        weights = weights * (sample_weight[:, None] if sample_weight.ndim == 1 else sample_weight)
    return (per_token * weights).sum() / real.sum()


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    labels = rng.integers(1, V, size=(3, 5)).astype("int32")
    labels[0, 3:] = 0
    labels[2, 1:] = 0
    logits = rng.normal(scale=3.0, size=(3, 5, V)).astype("float32")
    return labels, logits


@pytest.mark.parametrize("jit", [False, True])  # the plain TF kernels and their XLA twin
def test_matches_hand_computed_numpy(batch, jit):
    labels, logits = batch
    for eps in (0.1, 0.3):
        loss = LabelSmoothedCrossEntropy(label_smoothing=eps, jit_compile=jit)
        assert float(loss(labels, logits)) == pytest.approx(
            np_smoothed_loss(labels, logits, eps), rel=1e-5
        )


def test_tiny_case_by_hand():
    # V = 2, logits (0, 0): p = (1/2, 1/2), so every q gives -sum q log p = log 2.
    assert float(
        LabelSmoothedCrossEntropy()(np.array([[1]]), np.zeros((1, 1, 2)))
    ) == pytest.approx(np.log(2.0), rel=1e-6)
    # logits (log 3, 0): p = (3/4, 1/4); label 0, eps 0.1: q = (0.95, 0.05).
    expected = -(0.95 * np.log(0.75) + 0.05 * np.log(0.25))
    logits = np.array([[[np.log(3.0), 0.0]]], "float32")
    assert float(LabelSmoothedCrossEntropy(pad_id=-1)(np.array([[0]]), logits)) == pytest.approx(
        expected, rel=1e-6
    )


def test_padding_has_no_effect(batch):
    labels, logits = batch
    loss = LabelSmoothedCrossEntropy()
    reference = float(loss(labels, logits))
    rng = np.random.default_rng(1)
    # Longer sequences: extra padded positions with arbitrary, even huge, logits.
    padded_labels = np.concatenate([labels, np.zeros((3, 4), "int32")], axis=1)
    padded_logits = np.concatenate(
        [logits, rng.normal(scale=100.0, size=(3, 4, V)).astype("float32")], axis=1
    )
    # Padding also inside the original padded positions gets arbitrary logits.
    padded_logits[:, :5][labels == 0] = rng.normal(scale=50.0, size=((labels == 0).sum(), V))
    # And two all-padding sequences.
    padded_labels = np.concatenate([padded_labels, np.zeros((2, 9), "int32")])
    padded_logits = np.concatenate([padded_logits, rng.normal(size=(2, 9, V)).astype("float32")])
    assert float(loss(padded_labels, padded_logits)) == pytest.approx(reference, rel=1e-6)


def test_no_smoothing_is_sparse_cross_entropy_over_real_tokens(batch):
    labels, logits = batch
    ours = float(LabelSmoothedCrossEntropy(label_smoothing=0.0)(labels, logits))
    real = labels != 0
    nll = -np.take_along_axis(np_log_softmax(logits), labels[..., None], axis=-1)[..., 0]
    assert ours == pytest.approx(nll[real].mean(), rel=1e-5)
    keras_ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)
    assert ours == pytest.approx(float(keras_ce(labels, logits)), rel=1e-5)


def test_probabilities_give_the_same_loss_as_logits(batch):
    labels, logits = batch
    probabilities = np.asarray(keras.ops.softmax(logits))
    from_logits = float(LabelSmoothedCrossEntropy()(labels, logits))
    from_probabilities = float(LabelSmoothedCrossEntropy(from_logits=False)(labels, probabilities))
    assert from_probabilities == pytest.approx(from_logits, rel=1e-4)


def test_mixed_bfloat16_logits_are_computed_in_float32(batch):
    labels, logits = batch
    loss = LabelSmoothedCrossEntropy()
    bf16_logits = tf.cast(logits * 10.0, tf.bfloat16)  # large logits, bfloat16 precision
    value = loss(labels, bf16_logits)
    assert value.dtype == tf.float32
    assert np.isfinite(float(value))
    exact = np_smoothed_loss(labels, np.asarray(tf.cast(bf16_logits, tf.float32)))
    assert float(value) == pytest.approx(exact, rel=1e-5)  # no bf16 arithmetic inside
    assert float(value) == pytest.approx(np_smoothed_loss(labels, logits * 10.0), rel=2e-2)


def test_trains_under_mixed_bfloat16_policy(batch):
    """One step under mixed_bfloat16: the logged loss, accuracy and perplexity are those of the
    bfloat16 logits before the update (formulas in numpy), and the weights moved."""
    labels, _ = batch
    keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    try:
        model = keras.Sequential(
            [keras.Input((5,), dtype="int32"), keras.layers.Embedding(V, 8), keras.layers.Dense(V)]
        )
        model.compile(
            optimizer="adam",
            loss=LabelSmoothedCrossEntropy(),
            metrics=[MaskedAccuracy(), Perplexity()],
            jit_compile=False,
        )
        logits = model(labels)
        assert logits.dtype == "bfloat16"
        before = [w.copy() for w in model.get_weights()]
        logs = model.train_on_batch(labels, labels, return_dict=True)
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    logits = np.asarray(tf.cast(logits, tf.float32))
    real = labels != 0
    nll = -np.take_along_axis(np_log_softmax(logits), labels[..., None], axis=-1)[..., 0]
    assert logs["loss"] == pytest.approx(np_smoothed_loss(labels, logits), rel=1e-5)
    assert logs["perplexity"] == pytest.approx(np.exp(nll[real].mean()), rel=1e-5)
    assert logs["masked_accuracy"] == pytest.approx((logits.argmax(-1) == labels)[real].mean())
    assert all(np.abs(a - b).max() > 0 for a, b in zip(before, model.get_weights()))


def test_sample_weight_scales_tokens_but_not_the_divisor(batch):
    labels, logits = batch
    loss = LabelSmoothedCrossEntropy()
    per_sequence = np.array([1.0, 0.0, 2.0], "float32")
    assert float(loss(labels, logits, sample_weight=per_sequence)) == pytest.approx(
        np_smoothed_loss(labels, logits, sample_weight=per_sequence), rel=1e-5
    )
    per_token = np.random.default_rng(2).uniform(size=labels.shape).astype("float32")
    assert float(loss(labels, logits, sample_weight=per_token)) == pytest.approx(
        np_smoothed_loss(labels, logits, sample_weight=per_token), rel=1e-5
    )


def test_reductions_and_label_shapes(batch):
    labels, logits = batch
    per_token = np.asarray(LabelSmoothedCrossEntropy(reduction=None)(labels, logits))
    assert per_token.shape == labels.shape
    assert np.all(per_token[labels == 0] == 0.0) and np.all(per_token[labels != 0] > 0.0)
    total = float(LabelSmoothedCrossEntropy(reduction="sum")(labels, logits))
    assert total == pytest.approx(per_token.sum(), rel=1e-6)
    mean = float(LabelSmoothedCrossEntropy()(labels, logits))
    assert mean == pytest.approx(total / (labels != 0).sum(), rel=1e-6)
    assert float(LabelSmoothedCrossEntropy()(labels[..., None], logits)) == pytest.approx(mean)
    with pytest.raises(ValueError):
        LabelSmoothedCrossEntropy(reduction="bogus")


def test_all_padding_gives_zero_not_nan():
    value = LabelSmoothedCrossEntropy()(np.zeros((2, 3), "int32"), np.ones((2, 3, V), "float32"))
    assert float(value) == 0.0


@pytest.mark.parametrize("jit", [False, True])
def test_gradient_is_zero_at_padding(batch, jit):
    labels, logits = batch
    logits = tf.Variable(logits)
    with tf.GradientTape() as tape:
        value = LabelSmoothedCrossEntropy(jit_compile=jit)(labels, logits)
    gradient = tape.gradient(value, logits).numpy()
    assert np.all(gradient[labels == 0] == 0.0)
    assert np.all(np.isfinite(gradient)) and np.abs(gradient[labels != 0]).sum() > 0
    # d loss / d logits = (softmax - q) / number of real tokens.
    probabilities = np.exp(np_log_softmax(logits.numpy()))
    q = 0.9 * np.eye(V)[labels] + 0.1 / V
    expected = (probabilities - q) / (labels != 0).sum()
    np.testing.assert_allclose(gradient[labels != 0], expected[labels != 0], atol=1e-6)


def test_loss_ignores_a_keras_mask_on_the_logits(batch):
    labels, logits = batch
    masked_logits = tf.constant(logits)
    masked_logits._keras_mask = tf.constant(np.ones(labels.shape, bool) & (np.arange(5) < 2))
    assert float(LabelSmoothedCrossEntropy()(labels, masked_logits)) == pytest.approx(
        np_smoothed_loss(labels, logits), rel=1e-5
    )


def test_keras_reports_the_token_mean_in_evaluate(batch):
    labels, _ = batch
    model = keras.Sequential(
        [keras.Input((5,), dtype="int32"), keras.layers.Embedding(V, 4), keras.layers.Dense(V)]
    )
    model.compile(
        loss=LabelSmoothedCrossEntropy(),
        metrics=[MaskedAccuracy(), Perplexity()],
        jit_compile=False,
    )
    logits = np.asarray(model(labels))
    logs = model.evaluate(labels, labels, batch_size=3, verbose=0, return_dict=True)
    assert logs["loss"] == pytest.approx(np_smoothed_loss(labels, logits), rel=1e-5)
    real = labels != 0
    assert logs["masked_accuracy"] == pytest.approx((logits.argmax(-1) == labels)[real].mean())


def test_loss_config_round_trip():
    loss = LabelSmoothedCrossEntropy(
        label_smoothing=0.2,
        pad_id=3,
        from_logits=False,
        cross_replica_normalization=False,
        name="ls",
        jit_compile=False,
    )
    config = loss.get_config()
    assert config == {
        "name": "ls",
        "reduction": "sum_over_batch_size",
        "label_smoothing": 0.2,
        "from_logits": False,
        "pad_id": 3,
        "cross_replica_normalization": False,
        "jit_compile": False,
    }
    assert LabelSmoothedCrossEntropy.from_config(config).get_config() == config
    serialized = keras.saving.serialize_keras_object(loss)
    assert serialized["registered_name"] == "keras_transformer>LabelSmoothedCrossEntropy"
    assert keras.saving.deserialize_keras_object(serialized).get_config() == config


@pytest.mark.parametrize("jit", [False, True])
def test_masked_accuracy_against_numpy(batch, jit):
    labels, logits = batch
    metric = MaskedAccuracy(jit_compile=jit)
    rng = np.random.default_rng(5)
    labels2 = rng.integers(0, V, size=(4, 5)).astype("int32")
    logits2 = rng.normal(size=(4, 5, V)).astype("float32")
    logits2[..., :] += 3.0 * np.eye(V)[labels2]  # mostly right
    metric.update_state(labels, logits)
    metric.update_state(labels2, logits2)
    right = np.concatenate(
        [(logits.argmax(-1) == labels)[labels != 0], (logits2.argmax(-1) == labels2)[labels2 != 0]]
    )
    assert float(metric.result()) == pytest.approx(right.mean(), rel=1e-6)
    metric.reset_state()
    assert float(metric.result()) == 0.0


@pytest.mark.parametrize("jit", [False, True])
def test_perplexity_against_numpy(batch, jit):
    labels, logits = batch
    metric = Perplexity(jit_compile=jit)
    metric.update_state(labels[:2], logits[:2])
    metric.update_state(labels[2:], logits[2:])  # streaming: token-weighted across batches
    nll = -np.take_along_axis(np_log_softmax(logits), labels[..., None], axis=-1)[..., 0]
    assert float(metric.result()) == pytest.approx(np.exp(nll[labels != 0].mean()), rel=1e-5)
    uniform = Perplexity(jit_compile=jit)
    uniform.update_state(labels, np.zeros_like(logits))
    assert float(uniform.result()) == pytest.approx(V, rel=1e-5)


def test_token_count_and_metric_configs(batch):
    labels, logits = batch
    counter = TokenCount()
    counter.update_state(labels, logits)
    counter.update_state(labels, logits)
    assert float(counter.result()) == 2 * (labels != 0).sum()
    for metric in (
        MaskedAccuracy(pad_id=2, name="acc"),
        Perplexity(from_logits=False),
        TokenCount(pad_id=1),
    ):
        serialized = keras.saving.serialize_keras_object(metric)
        assert serialized["registered_name"] == f"keras_transformer>{type(metric).__name__}"
        restored = keras.saving.deserialize_keras_object(serialized)
        assert type(restored) is type(metric)
        assert restored.get_config() == metric.get_config()


def test_compiled_model_with_loss_and_metrics_saves_and_loads(batch, tmp_path):
    labels, _ = batch
    model = keras.Sequential(
        [keras.Input((5,), dtype="int32"), keras.layers.Embedding(V, 4), keras.layers.Dense(V)]
    )
    model.compile(
        optimizer="adam",
        loss=LabelSmoothedCrossEntropy(label_smoothing=0.2),
        metrics=[MaskedAccuracy(), Perplexity(), TokenCount()],
        jit_compile=False,
    )
    model.fit(labels, labels, epochs=1, verbose=0)
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert loaded.loss.get_config()["label_smoothing"] == 0.2
    a = model.evaluate(labels, labels, verbose=0, return_dict=True)
    b = loaded.evaluate(labels, labels, verbose=0, return_dict=True)
    assert a.keys() == b.keys() and {"masked_accuracy", "perplexity", "tokens"} <= set(a)
    for key in a:
        assert b[key] == pytest.approx(a[key], rel=1e-6), key


def test_token_cross_entropy_helper(batch):
    labels, logits = batch
    losses, mask = token_cross_entropy(labels, logits, label_smoothing=0.1)
    np.testing.assert_array_equal(np.asarray(mask), (labels != 0).astype("float32"))
    assert float(np.asarray(losses).sum() / np.asarray(mask).sum()) == pytest.approx(
        np_smoothed_loss(labels, logits), rel=1e-5
    )


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_fused_kernels_and_plain_ops_agree_with_gradients(batch, label_smoothing):
    labels, logits = batch
    results = []
    for fused in (True, False):
        variable = tf.Variable(logits)
        with tf.GradientTape() as tape:
            losses, _ = token_cross_entropy(labels, variable, label_smoothing, fused=fused)
            total = tf.reduce_sum(losses)
        results.append((losses.numpy(), tape.gradient(total, variable).numpy()))
    (fused_losses, fused_grad), (plain_losses, plain_grad) = results
    np.testing.assert_allclose(fused_losses, plain_losses, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fused_grad, plain_grad, atol=1e-6)
    assert np.abs(fused_grad).sum() > 0


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_xla_and_tf_kernels_agree(dtype):
    """The XLA-compiled loss and metrics (default) match TF's kernels: values and gradients."""
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 50, size=(4, 6))
    labels[:, 4:] = 0  # padding
    logits = tf.constant(rng.normal(size=(4, 6, 50)) * 3, dtype=dtype)
    results = {}
    for jit in (True, False):
        loss = LabelSmoothedCrossEntropy(label_smoothing=0.1, jit_compile=jit)
        with tf.GradientTape() as tape:
            tape.watch(logits)
            value = loss(labels, logits)
        gradient = tape.gradient(value, logits)
        assert gradient.dtype == logits.dtype
        metrics = [MaskedAccuracy(jit_compile=jit), Perplexity(jit_compile=jit)]
        for metric in metrics:
            metric.update_state(labels, logits)
        results[jit] = [float(value), np.asarray(tf.cast(gradient, "float32"))] + [
            float(m.result()) for m in metrics
        ]
    expected = np_smoothed_loss(labels, np.asarray(tf.cast(logits, "float32")))
    assert results[True][0] == pytest.approx(expected, rel=1e-5)
    assert results[False][0] == pytest.approx(expected, rel=1e-5)
    # Tolerances scaled to this gradient: its entries (softmax(z) - q) / N (N = 16 real tokens)
    # are at most 1/N (measured: max 0.057, median 1.2e-4), so the old atol of 1e-2 could not
    # see most entries being wrong. The loss computes in float32 and rounds once to the logits'
    # dtype: each entry is within half an ulp (relative 2**-8 for bfloat16's 8-bit significand,
    # 2**-24 for float32) of a float32 value whose own error, where softmax ~ q cancel, is a few
    # float32 roundings of the operands' scale 1/N: 32 * 2**-24 / N (measured: 3.4 * 2**-24 / N
    # in one run, 12.3 * 2**-24 / N at the largest entry in another: the same code on the same
    # inputs, float32's exp and log-softmax differing by a few ulps between runs).
    real = labels != 0
    half_ulp = 2.0**-8 if dtype == "bfloat16" else 2.0**-24
    float32_error = 32 * 2.0**-24 / real.sum()
    # XLA and TF round float32 values within float32_error of each other: at most one ulp apart
    # (measured: bit-identical in bfloat16, 7.5e-9 apart in float32).
    np.testing.assert_allclose(
        results[True][1], results[False][1], rtol=2 * half_ulp, atol=2 * float32_error
    )
    assert np.abs(results[True][1]).max() > 1e-3  # a real gradient, not zeros
    assert results[True][2:] == pytest.approx(results[False][2:], rel=1e-5)
    # Against the formulas: d loss / d logits = (softmax(z) - q) / real tokens; accuracy and
    # perplexity (exp of the unsmoothed token mean) over real tokens.
    exact = np.asarray(tf.cast(logits, "float32"))
    q = 0.9 * np.eye(50)[labels] + 0.1 / 50
    expected_grad = np.where(real[..., None], np.exp(np_log_softmax(exact)) - q, 0.0) / real.sum()
    # Each entry within half an ulp of the exact value, plus float32's error (measured in
    # bfloat16: 0.99 * 2**-8 relative at most; the padding's entries are exactly 0).
    for gradient in (results[False][1], results[True][1]):
        np.testing.assert_allclose(gradient, expected_grad, rtol=half_ulp, atol=float32_error)
    nll = -np.take_along_axis(np_log_softmax(exact), labels[..., None], axis=-1)[..., 0]
    accuracy = (exact.argmax(-1) == labels)[real].mean()
    assert results[False][2:] == pytest.approx([accuracy, np.exp(nll[real].mean())], rel=1e-5)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
@pytest.mark.parametrize("fused", [True, False])
def test_plain_and_xla_per_token_losses_equal_the_formula(batch, label_smoothing, fused):
    """token_cross_entropy, plain TF ops and XLA-compiled, against section 5.4's formula written in
    numpy: per-token values and d loss / d logits = softmax(z) - q at real tokens, 0 at padding."""
    labels, logits = batch
    real = labels != 0
    q = (1.0 - label_smoothing) * np.eye(V)[labels] + label_smoothing / V
    log_p = np_log_softmax(logits)
    expected_losses = np.where(real, -(q * log_p).sum(axis=-1), 0.0)
    expected_grad = np.where(real[..., None], np.exp(log_p) - q, 0.0)
    results = {}
    for jit in (False, True):
        variable = tf.Variable(logits)
        with tf.GradientTape() as tape:
            losses, mask = token_cross_entropy(
                labels, variable, label_smoothing, fused=fused, jit_compile=jit
            )
            total = tf.reduce_sum(losses)
        results[jit] = (losses.numpy(), tape.gradient(total, variable).numpy())
        np.testing.assert_array_equal(np.asarray(mask), real.astype("float32"))
        np.testing.assert_allclose(results[jit][0], expected_losses, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(results[jit][1], expected_grad, atol=1e-6)
    np.testing.assert_allclose(results[True][0], results[False][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(results[True][1], results[False][1], atol=1e-6)


def test_plain_and_xla_metric_kernels_agree(batch):
    """The metrics' per-token functions: argmax hits and -log p_y, plain and XLA, vs numpy."""
    from keras_transformer import losses as module

    labels, logits = batch
    hits = (logits.argmax(-1) == labels).astype("float32")
    nll = -np.take_along_axis(np_log_softmax(logits), labels[..., None], axis=-1)[..., 0]
    for jit in (False, True):
        argmax_hits = module._kernel(module._argmax_hits, jit)
        forward_xent = module._kernel(module._forward_xent, jit)
        np.testing.assert_array_equal(np.asarray(argmax_hits(tf.constant(labels), logits)), hits)
        np.testing.assert_allclose(
            np.asarray(forward_xent(tf.constant(labels), logits)), nll, rtol=1e-5, atol=1e-6
        )
