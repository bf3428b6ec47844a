# Paper section 5.2 (data-parallel training): strategies and the Keras 3 multi-worker fix.
"""Tests of keras_transformer.distribute.

The training runs happen in subprocesses (tests/_distribute_worker.py): logical devices and
multi-worker strategies must be configured before TensorFlow initialises, and this pytest process
has already initialised it.
"""

import inspect
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import distribute
from tests._cluster import free_ports, wait_all

WORKER = os.path.join(os.path.dirname(__file__), "_distribute_worker.py")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 240  # a ceiling for a hung collective, far above a normal run


def _env(**extra):
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    env.update(
        TF_CPP_MIN_LOG_LEVEL="2",
        KERAS_BACKEND="tensorflow",
        CUDA_VISIBLE_DEVICES="",
        PYTHONPATH=os.pathsep.join(filter(None, [REPO_ROOT, env.get("PYTHONPATH")])),
    )
    env.update(extra)
    return env


def _check(process_name, output, returncode):
    assert returncode == 0, f"{process_name} failed (rc={returncode}):\n{output[-6000:]}"


# ----------------------------------------------------------------------------- get_strategy
def test_default_and_mirrored_strategies_in_process():
    assert distribute.get_strategy("default") is tf.distribute.get_strategy()
    strategy = distribute.get_strategy("mirrored")  # no GPU here: the one CPU
    assert isinstance(strategy, tf.distribute.MirroredStrategy)
    assert strategy.num_replicas_in_sync == max(1, len(tf.config.list_logical_devices("GPU")))


def test_auto_picks_multi_worker_only_with_a_cluster(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert isinstance(distribute.get_strategy("auto"), tf.distribute.MirroredStrategy)
    assert not distribute._has_cluster(json.dumps({"cluster": {}, "task": {}}))
    assert distribute._has_cluster(
        json.dumps({"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}})
    )
    with pytest.raises(ValueError, match="TF_CONFIG"):
        distribute._has_cluster("not json")


def test_get_strategy_rejects_bad_arguments():
    with pytest.raises(ValueError, match="kind"):
        distribute.get_strategy("tpu")
    with pytest.raises(ValueError, match="devices"):
        distribute.get_strategy("default", devices=["/cpu:0"])


# ----------------------------------------------------------------------------- the Keras fix
def test_keras_internals_the_fix_patches_are_unchanged():
    """Fails when Keras changes the code the fix replaces: re-check keras-team/keras#20585.

    If Keras fixed the bug upstream (these buggy lines are gone), drop apply_multi_worker_fix.
    """
    from keras.src.backend.tensorflow import trainer

    distribute.remove_multi_worker_fix()
    try:
        build = inspect.getsource(trainer.TensorFlowTrainer._maybe_symbolic_build)
        reduce = inspect.getsource(trainer.reduce_per_replica)
        assert list(
            inspect.signature(trainer.TensorFlowTrainer._maybe_symbolic_build).parameters
        ) == ["self", "iterator", "data_batch"]
        assert list(inspect.signature(trainer.reduce_per_replica).parameters) == [
            "values",
            "strategy",
            "reduction",
        ]
        # The two upstream bugs, verbatim (Keras 3.15.1).
        assert "self.distribute_strategy.reduce(" in build and '"MEAN",' in build
        assert 'return strategy.reduce("MEAN", v, axis=0)' in reduce
        assert "_collective_all_reduce_multi_worker(strategy)" in reduce
        # The training step looks reduce_per_replica up as a module global (so patching works).
        make_function = inspect.getsource(trainer.TensorFlowTrainer._make_function)
        assert "reduce_per_replica(" in make_function
    finally:
        distribute.apply_multi_worker_fix()


def test_fix_is_idempotent_and_reversible():
    from keras.src.backend.tensorflow import trainer

    distribute.remove_multi_worker_fix()
    original_build = trainer.TensorFlowTrainer._maybe_symbolic_build
    original_reduce = trainer.reduce_per_replica
    assert not distribute.multi_worker_fix_applied()
    assert distribute.apply_multi_worker_fix() is True
    assert distribute.apply_multi_worker_fix() is False
    assert distribute.multi_worker_fix_applied()
    assert trainer.TensorFlowTrainer._maybe_symbolic_build.__wrapped__ is original_build
    assert trainer.reduce_per_replica.__wrapped__ is original_reduce
    assert distribute.remove_multi_worker_fix() is True
    assert trainer.TensorFlowTrainer._maybe_symbolic_build is original_build
    assert trainer.reduce_per_replica is original_reduce
    distribute.apply_multi_worker_fix()


def test_fix_raises_clearly_when_keras_internals_are_gone(monkeypatch):
    from keras.src.backend.tensorflow import trainer

    distribute.remove_multi_worker_fix()
    monkeypatch.delattr(trainer, "reduce_per_replica")
    with pytest.raises(RuntimeError, match="reduce_per_replica.*20585"):
        distribute.apply_multi_worker_fix()


def test_fix_delegates_to_keras_for_single_worker_strategies():
    """Patched reduce_per_replica == the original for a (non multi-worker) mirrored strategy."""
    from keras.src.backend.tensorflow import trainer

    distribute.apply_multi_worker_fix()
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    values = {"loss": tf.constant(2.5), "vector": tf.constant([1.0, 3.0])}
    patched = trainer.reduce_per_replica(values, strategy, "auto")
    original = trainer.reduce_per_replica.__wrapped__(values, strategy, "auto")
    for key in values:
        np.testing.assert_allclose(patched[key], original[key])
    with strategy.scope():
        dense = keras.layers.Dense(1, kernel_initializer="zeros")
        model = keras.Sequential([keras.Input((3,)), dense])
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse", jit_compile=False)
    history = model.fit(np.ones((4, 3)), np.ones((4, 1)), batch_size=2, epochs=1, verbose=0)
    # By hand: step 1 predicts 0 (loss 1), gradient -2 for each weight and the bias, so w = b =
    # 0.02; step 2 predicts 4 * 0.02 (loss 0.92^2); the epoch logs the mean of both steps.
    assert history.history["loss"][0] == pytest.approx((1.0 + 0.92**2) / 2, rel=1e-5)
    np.testing.assert_allclose(dense.kernel.numpy(), np.full((3, 1), 0.02 + 0.02 * 0.92), rtol=1e-5)
    np.testing.assert_allclose(dense.bias.numpy(), [0.02 + 0.02 * 0.92], rtol=1e-5)


# ----------------------------------------------------------------------------- training runs
@pytest.fixture(scope="module")
def mirrored_run(tmp_path_factory):
    """Runs the worker's "mirrored" mode once; its one-device run is also the multi-worker
    reference."""
    out = tmp_path_factory.mktemp("mirrored")
    completed = subprocess.run(
        [sys.executable, WORKER, "mirrored", str(out)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    _check("mirrored worker", completed.stdout + completed.stderr, completed.returncode)
    return out


def test_mirrored_over_two_devices_matches_one_device(mirrored_run):
    """2 logical CPUs: same losses, metrics and weights as one device on the same global batches.

    The batches give the two replicas very different numbers of real target tokens (6 vs 20 in the
    first batch), so this also checks the loss' global token normalisation.
    """
    tmp_path = mirrored_run
    one, mirrored = np.load(tmp_path / "one.npz"), np.load(tmp_path / "mirrored.npz")
    initial = np.load(tmp_path / "initial.npz")

    assert int(one["iterations"]) == int(mirrored["iterations"]) == 6
    np.testing.assert_allclose(mirrored["batch_losses"], one["batch_losses"], rtol=1e-5)
    # End-of-epoch logs read Keras' on_read metric variables across replicas: global values.
    for key in ("epoch_loss", "epoch_accuracy", "epoch_perplexity"):
        np.testing.assert_allclose(mirrored[key], one[key], rtol=1e-5, err_msg=key)
    assert one["batch_losses"][-1] < one["batch_losses"][0]  # it trained

    paths = list(one["weight_paths"])
    assert paths == list(mirrored["weight_paths"])
    # The worker trained the Transformer (1 + 1 layers), not a stand-in.
    assert sum(path.endswith("query_kernel") for path in paths) == 3, paths
    compared = 0
    for i, path in enumerate(paths):
        if path.endswith("key_bias"):
            # A key bias adds the same score to every key, which softmax cancels: its gradient is
            # float round-off, and Adam (epsilon 1e-9) turns round-off into lr-sized steps.
            continue
        np.testing.assert_allclose(
            mirrored[f"weight_{i}"], one[f"weight_{i}"], atol=1e-5, err_msg=path
        )
        assert np.max(np.abs(one[f"weight_{i}"] - initial[f"arr_{i}"])) > 1e-3, path  # it moved
        compared += 1
    assert compared >= len(paths) - 3

    # Each replica's loss is its share of the global token mean: the shares add up to it.
    shares = np.load(tmp_path / "loss_shares.npz")
    assert shares["replica_tokens"][0] != shares["replica_tokens"][1]
    np.testing.assert_allclose(shares["global"].sum(), shares["one_device"], rtol=1e-5)
    # Keras' usual per-replica mean / num_replicas would not, with unequal token counts.
    assert abs(shares["per_replica"].sum() - shares["one_device"]) > 1e-2


def test_two_worker_multi_worker_mirrored_fit(tmp_path, mirrored_run):
    """Two workers on localhost train with model.fit (fix applied): they agree with each other, and
    with one device (no strategy, the mirrored run's reference) on the same global batches."""
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    processes = []
    for index in range(2):
        tf_config = json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        )
        log = open(tmp_path / f"worker_{index}.log", "w")
        processes.append(
            (
                subprocess.Popen(
                    [sys.executable, WORKER, "multi_worker", str(tmp_path)],
                    env=_env(TF_CONFIG=tf_config),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                ),
                log,
            )
        )
    returncodes = wait_all(processes, TIMEOUT_S)  # one budget for both: they wait on each other
    for index, returncode in enumerate(returncodes):
        _check(f"worker {index}", (tmp_path / f"worker_{index}.log").read_text(), returncode)

    first, second = (np.load(tmp_path / f"worker_{i}.npz") for i in range(2))
    one = np.load(mirrored_run / "one.npz")
    assert int(first["num_replicas"]) == int(second["num_replicas"]) == 2
    assert int(first["iterations"]) == 6
    assert np.all(np.isfinite(first["batch_losses"]))
    np.testing.assert_array_equal(first["batch_losses"], second["batch_losses"])
    np.testing.assert_array_equal(first["epoch_loss"], second["epoch_loss"])
    assert first["epoch_loss"][-1] < first["epoch_loss"][0]
    assert float(first["max_weight_change"]) > 1e-3
    paths = list(first["weight_paths"])
    assert paths == list(one["weight_paths"])
    for i, path in enumerate(paths):
        np.testing.assert_array_equal(first[f"weight_{i}"], second[f"weight_{i}"], err_msg=path)

    np.testing.assert_allclose(first["batch_losses"], one["batch_losses"], rtol=1e-5)
    for key in ("epoch_loss", "epoch_accuracy", "epoch_perplexity"):
        np.testing.assert_allclose(first[key], one[key], rtol=1e-5, err_msg=key)
    for i, path in enumerate(paths):
        if not path.endswith("key_bias"):  # see test_mirrored_over_two_devices_matches_one_device
            np.testing.assert_allclose(
                first[f"weight_{i}"], one[f"weight_{i}"], atol=1e-5, err_msg=path
            )
