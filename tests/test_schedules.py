# Paper section 5.3 (Optimizer), equation (3): tests of the learning-rate schedule and Adam.
import math

import keras
import numpy as np
import pytest

from keras_transformer.schedules import TransformerSchedule, transformer_optimizer


def paper_rate(step_num, d_model=512, warmup_steps=4000):
    """Equation (3), written out independently: step_num starts at 1."""
    return d_model**-0.5 * min(step_num**-0.5, step_num * warmup_steps**-1.5)


# Keras passes optimizer.iterations, which is 0 during the first update: iterations i -> step i + 1.
@pytest.mark.parametrize("step_num", [1, 2, 100, 3999, 4000, 4001, 100000])
def test_values_follow_equation_3(step_num):
    schedule = TransformerSchedule(512, warmup_steps=4000)
    iterations = step_num - 1
    assert float(schedule(iterations)) == pytest.approx(paper_rate(step_num), rel=1e-6)


def test_named_values_for_the_base_model():
    schedule = TransformerSchedule(512)
    assert float(schedule(0)) == pytest.approx(512**-0.5 * 4000**-1.5, rel=1e-6)  # step 1
    assert float(schedule(3999)) == pytest.approx(1 / math.sqrt(512 * 4000), rel=1e-6)  # step 4000
    assert float(schedule(99999)) == pytest.approx(1 / math.sqrt(512 * 100000), rel=1e-6)
    assert float(schedule(0)) > 0.0  # the first update is not wasted


def test_peak_is_at_the_end_of_warmup():
    schedule = TransformerSchedule(512, warmup_steps=4000)
    iterations = np.arange(0, 12000)
    rates = np.asarray(schedule(iterations))
    assert int(np.argmax(rates)) == 3999  # step_num 4000
    assert rates.max() == pytest.approx(schedule.peak_learning_rate(), rel=1e-6)
    assert schedule.peak_learning_rate() == pytest.approx(512**-0.5 * 4000**-0.5)
    assert np.all(np.diff(rates[:4000]) > 0) and np.all(np.diff(rates[4000:]) < 0)


def test_scale_multiplies_and_d_model_divides():
    base = float(TransformerSchedule(512)(10))
    assert float(TransformerSchedule(512, scale=2.0)(10)) == pytest.approx(2 * base, rel=1e-6)
    assert float(TransformerSchedule(128)(10)) == pytest.approx(2 * base, rel=1e-6)


def test_rejects_bad_arguments():
    for kwargs in (
        {"d_model": 0},
        {"d_model": 512, "warmup_steps": 0},
        {"d_model": 512, "scale": -1.0},
        {"d_model": 512, "gradient_accumulation_steps": 0},
    ):
        with pytest.raises(ValueError):
            TransformerSchedule(**kwargs)


def test_config_round_trip_and_registration():
    schedule = TransformerSchedule(256, warmup_steps=123, scale=0.5, gradient_accumulation_steps=3)
    config = schedule.get_config()
    assert config == {
        "d_model": 256,
        "warmup_steps": 123,
        "scale": 0.5,
        "gradient_accumulation_steps": 3,
    }
    again = TransformerSchedule.from_config(config)
    assert again.get_config() == config
    serialized = keras.saving.serialize_keras_object(schedule)
    assert serialized["registered_name"] == "keras_transformer>TransformerSchedule"
    restored = keras.saving.deserialize_keras_object(serialized)
    assert isinstance(restored, TransformerSchedule) and restored.get_config() == config
    assert float(restored(7)) == pytest.approx(float(schedule(7)))


def test_compiled_model_saves_and_loads_with_the_schedule(tmp_path):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)])
    model.compile(
        optimizer=transformer_optimizer(64, warmup_steps=50, scale=2.0),
        loss="mse",
        jit_compile=False,
    )
    model.fit(np.ones((8, 4)), np.zeros((8, 2)), batch_size=4, epochs=1, verbose=0)  # 2 updates
    path = tmp_path / "model.keras"
    model.save(path)

    loaded = keras.models.load_model(path)  # no custom_objects: the schedule is registered
    schedule = loaded.optimizer._learning_rate
    assert isinstance(schedule, TransformerSchedule)
    assert schedule.get_config() == model.optimizer._learning_rate.get_config()
    assert int(loaded.optimizer.iterations.numpy()) == 2
    # The next update (the third) uses step_num 3.
    assert float(loaded.optimizer.learning_rate) == pytest.approx(
        2.0 * paper_rate(3, d_model=64, warmup_steps=50), rel=1e-6
    )
    assert (loaded.optimizer.beta_1, loaded.optimizer.beta_2, loaded.optimizer.epsilon) == (
        0.9,
        0.98,
        1e-9,
    )
    for a, b in zip(model.get_weights(), loaded.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def _updates(optimizer, gradients):
    """Applies a constant gradient of 1 for each entry; returns the weight change at each call."""
    variable = keras.Variable(np.zeros(()), dtype="float32")
    optimizer.build([variable])
    changes = []
    for gradient in gradients:
        before = float(variable.numpy())
        optimizer.apply_gradients([(keras.ops.convert_to_tensor(gradient, "float32"), variable)])
        changes.append(before - float(variable.numpy()))
    return changes


def test_first_update_uses_step_1():
    schedule = TransformerSchedule(16, warmup_steps=10)
    changes = _updates(keras.optimizers.SGD(learning_rate=schedule), [1.0, 1.0, 1.0])
    expected = [paper_rate(s, 16, 10) for s in (1, 2, 3)]
    np.testing.assert_allclose(changes, expected, rtol=1e-5)


def test_gradient_accumulation_counts_real_updates():
    """Keras hands the schedule its raw micro-batch counter; the schedule maps it to real
    updates."""
    steps = 2
    schedule = TransformerSchedule(16, warmup_steps=10, gradient_accumulation_steps=steps)
    optimizer = keras.optimizers.SGD(learning_rate=schedule, gradient_accumulation_steps=steps)
    changes = _updates(optimizer, [1.0] * 6)
    # Weights move on every 2nd micro-batch, by the rate of update 1, 2, 3.
    expected = [0.0, paper_rate(1, 16, 10), 0.0, paper_rate(2, 16, 10), 0.0, paper_rate(3, 16, 10)]
    np.testing.assert_allclose(changes, expected, rtol=1e-5, atol=1e-12)
    assert int(optimizer.iterations.numpy()) == 3  # public counter: real updates
    assert int(optimizer._iterations.numpy()) == 6  # raw counter: micro-batches


def test_gradient_accumulation_without_telling_the_schedule_runs_it_k_times_faster():
    """Documents Keras' behaviour: a plain schedule sees micro-batches (raw counter k*n - 1)."""
    schedule = TransformerSchedule(16, warmup_steps=10)
    optimizer = keras.optimizers.SGD(learning_rate=schedule, gradient_accumulation_steps=2)
    changes = _updates(optimizer, [1.0] * 4)
    np.testing.assert_allclose(
        changes[1::2], [paper_rate(2, 16, 10), paper_rate(4, 16, 10)], rtol=1e-5
    )


def test_transformer_optimizer_is_the_papers_adam():
    optimizer = transformer_optimizer(512)
    assert isinstance(optimizer, keras.optimizers.Adam)
    assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)
    assert optimizer._learning_rate.get_config() == TransformerSchedule(512).get_config()
    assert transformer_optimizer(512, epsilon=1e-8, clipnorm=1.0).clipnorm == 1.0
    with pytest.raises(TypeError, match="learning_rate"):
        transformer_optimizer(512, learning_rate=1e-3)


def test_transformer_optimizer_with_gradient_accumulation():
    optimizer = transformer_optimizer(16, warmup_steps=10, gradient_accumulation_steps=2)
    assert optimizer.gradient_accumulation_steps == 2
    assert optimizer._learning_rate.gradient_accumulation_steps == 2
    # With a constant gradient, Adam's bias-corrected step is the learning rate itself.
    changes = _updates(optimizer, [0.3] * 4)
    np.testing.assert_allclose(
        changes, [0.0, paper_rate(1, 16, 10), 0.0, paper_rate(2, 16, 10)], rtol=1e-4, atol=1e-12
    )


def test_fused_adam_equals_keras_adam():
    """TF's fused kernel gives Keras' Adam update (several steps, dense and sparse gradients)."""
    import tensorflow as tf

    from keras_transformer.optimizers import FusedAdam

    rng = np.random.default_rng(0)
    start = [rng.normal(size=(4, 3)).astype("float32"), rng.normal(size=(6, 2)).astype("float32")]
    grads = [
        [rng.normal(size=(4, 3)).astype("float32"), rng.normal(size=(6, 2)).astype("float32")]
        for _ in range(4)
    ]
    results = []
    for cls in (keras.optimizers.Adam, FusedAdam):
        variables = [keras.Variable(v) for v in start]
        optimizer = cls(
            learning_rate=TransformerSchedule(8, warmup_steps=2), beta_2=0.98, epsilon=1e-9
        )
        for step_grads in grads:
            sparse = tf.IndexedSlices(
                tf.constant(step_grads[1][:2]), tf.constant([1, 4]), tf.constant([6, 2])
            )
            optimizer.apply([tf.constant(step_grads[0]), sparse], variables)
        results.append(
            [v.numpy() for v in variables]
            + [m.numpy() for m in optimizer.variables if m.shape == (4, 3)]
        )
    for ours, theirs in zip(results[1], results[0], strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6)  # float rounding
    assert not np.allclose(results[1][0], start[0])  # the weights moved
    assert isinstance(transformer_optimizer(16), FusedAdam)


@pytest.mark.parametrize("accumulation", [None, 2])
def test_transformer_optimizer_fused_switch_trains_like_stock_adam(accumulation):
    """fused=False is stock keras.optimizers.Adam; fused=True (FusedAdam) trains a small model to
    the same weights and Adam slots over several updates."""
    from keras_transformer.optimizers import FusedAdam

    kwargs = {"gradient_accumulation_steps": accumulation} if accumulation else {}
    plain = transformer_optimizer(8, warmup_steps=3, fused=False, **kwargs)
    fused = transformer_optimizer(8, warmup_steps=3, **kwargs)
    # The plain path is Keras' Adam; its only change is accumulation under tf.distribute.
    from keras_transformer.accumulation import DistributedAccumulation
    from keras_transformer.optimizers import Adam

    assert type(plain) is Adam and type(fused) is FusedAdam
    assert Adam.__mro__[1:3] == (DistributedAccumulation, keras.optimizers.Adam)
    assert set(vars(Adam)) <= {"__module__", "__doc__", "__qualname__", "__firstlineno__"} | {
        "__static_attributes__"
    }
    assert {**plain.get_config(), "name": ""} == {**fused.get_config(), "name": ""}
    rng = np.random.default_rng(0)
    x = rng.normal(size=(24, 4)).astype("float32")
    y = rng.normal(size=(24, 2)).astype("float32")
    results = []
    for optimizer in (plain, fused):
        keras.utils.set_random_seed(7)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5), keras.layers.Dense(2)])
        model.compile(optimizer=optimizer, loss="mse", jit_compile=False)
        model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)  # 6 micro-batches
        results.append(model.get_weights() + [v.numpy() for v in optimizer.variables])
    for ours, theirs in zip(results[1], results[0], strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6)  # float rounding
    assert int(fused.iterations.numpy()) == (3 if accumulation else 6)
