# Paper section 5.2 (data-parallel training): subprocess helper for tests/test_distribute.py.
"""Trains a tiny seq2seq model with ``model.fit`` under a ``tf.distribute`` strategy.

Run as a subprocess, because logical devices and multi-worker strategies must be set up before
TensorFlow initialises:

    python tests/_distribute_worker.py mirrored OUT_DIR
        Splits the CPU into 2 logical devices; trains the same initial weights on the same global
        batches (a) on one device without a strategy, (b) with MirroredStrategy over both devices,
        and writes OUT_DIR/{one,mirrored}.npz (per-batch losses, epoch logs, final weights),
        OUT_DIR/initial.npz and OUT_DIR/loss_shares.npz (each replica's share of one batch's loss
        with global and with per-replica token normalisation).

    TF_CONFIG=... python tests/_distribute_worker.py multi_worker OUT_DIR
        Builds the strategy with get_strategy() (MultiWorkerMirroredStrategy, fix applied), trains,
        and writes OUT_DIR/worker_<task index>.npz.

The model is always ``build_transformer(TransformerConfig.tiny(V, num_layers=1, dropout=0))``: an
import error fails the run (and the test) instead of training some other model.
"""

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

VOCAB = 23
GLOBAL_BATCH = 8
SOURCE_LENGTH = 7
TARGET_LENGTH = 6
NUM_BATCHES = 3
EPOCHS = 2


def make_data(seed=7):
    """Token ids with heavy padding in the first half of every batch and little in the second.

    MirroredStrategy gives the first half of a global batch to replica 0, so the replicas hold very
    different numbers of real target tokens: the case where per-replica averaging goes wrong.
    """
    rng = np.random.default_rng(seed)
    n = GLOBAL_BATCH * NUM_BATCHES
    source = rng.integers(1, VOCAB, size=(n, SOURCE_LENGTH)).astype("int32")
    target = rng.integers(1, VOCAB, size=(n, TARGET_LENGTH)).astype("int32")
    labels = rng.integers(1, VOCAB, size=(n, TARGET_LENGTH)).astype("int32")
    for i in range(n):
        short = (i % GLOBAL_BATCH) < GLOBAL_BATCH // 2
        target_length = rng.integers(1, 3) if short else rng.integers(5, TARGET_LENGTH + 1)
        source_length = rng.integers(2, SOURCE_LENGTH + 1)
        source[i, source_length:] = 0
        target[i, target_length:] = 0
        labels[i, target_length:] = 0
    return {"source": source, "target": target}, labels


def make_dataset(x, y, shard_by_data=False):
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    if shard_by_data:
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = (
            tf.data.experimental.AutoShardPolicy.DATA
        )
        dataset = dataset.with_options(options)
    return dataset


def build_model():
    """The tiny Transformer and its d_model (no stand-in: a broken import must fail the test)."""
    from keras_transformer import TransformerConfig, build_transformer

    config = TransformerConfig.tiny(VOCAB, num_layers=1, dropout=0.0, attention_dropout=0.0)
    return build_transformer(config), config.d_model


def compile_model(model, d_model, cross_replica_normalization=True):
    from keras_transformer.losses import LabelSmoothedCrossEntropy
    from keras_transformer.metrics import MaskedAccuracy, Perplexity
    from keras_transformer.schedules import transformer_optimizer

    model.compile(
        optimizer=transformer_optimizer(d_model, warmup_steps=10),
        loss=LabelSmoothedCrossEntropy(
            label_smoothing=0.1, cross_replica_normalization=cross_replica_normalization
        ),
        metrics=[MaskedAccuracy(), Perplexity()],
        jit_compile=False,
    )


def train(model, dataset):
    import keras

    batch_losses = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            batch_losses.append(float(logs["loss"]))

    start = time.time()
    history = model.fit(dataset, epochs=EPOCHS, verbose=0, shuffle=False, callbacks=[Record()])
    print(f"fit: {time.time() - start:.1f}s", flush=True)
    return {
        "batch_losses": np.array(batch_losses),
        "epoch_loss": np.array(history.history["loss"]),
        "epoch_accuracy": np.array(history.history["masked_accuracy"]),
        "epoch_perplexity": np.array(history.history["perplexity"]),
        "iterations": np.array(int(model.optimizer.iterations.numpy())),
        "weight_paths": np.array([w.path for w in model.weights]),
        **{f"weight_{i}": w for i, w in enumerate(model.get_weights())},
    }


def train_one_device():
    """The reference: no strategy, seed 1234. Returns (train() result, initial weights, d_model)."""
    import keras

    x, y = make_data()
    keras.utils.set_random_seed(1234)
    model, d_model = build_model()
    initial = model.get_weights()
    compile_model(model, d_model)
    return train(model, make_dataset(x, y)), initial, d_model


def run_mirrored(out_dir):
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
    )
    from keras_transformer.distribute import get_strategy

    with tf.device("/cpu:0"):
        one, initial, d_model = train_one_device()
    np.savez(os.path.join(out_dir, "initial.npz"), *initial)
    np.savez(os.path.join(out_dir, "one.npz"), **one)

    x, y = make_data()
    strategy = get_strategy("mirrored", devices=["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2, strategy.num_replicas_in_sync
    with strategy.scope():
        model, _ = build_model()
        model.set_weights(initial)
        compile_model(model, d_model)
    np.savez(os.path.join(out_dir, "mirrored.npz"), **train(model, make_dataset(x, y)))
    np.savez(os.path.join(out_dir, "loss_shares.npz"), **loss_shares(strategy, y))


def loss_shares(strategy, labels):
    """Each replica's loss on one global batch, for both normalisations, and the one-device loss.

    Keras sums replicas' gradients, so the replicas' losses must add up to the global loss.
    """
    from keras_transformer.losses import LabelSmoothedCrossEntropy

    labels = labels[:GLOBAL_BATCH]
    logits = np.random.default_rng(3).normal(size=labels.shape + (VOCAB,)).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((labels, logits)).batch(GLOBAL_BATCH)
    batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
    result = {"one_device": np.array(float(LabelSmoothedCrossEntropy()(labels, logits)))}
    for name, normalization in (("global", True), ("per_replica", False)):
        loss = LabelSmoothedCrossEntropy(cross_replica_normalization=normalization)
        shares = strategy.run(tf.function(loss), args=batch)
        result[name] = np.array([float(v) for v in strategy.experimental_local_results(shares)])
    result["replica_tokens"] = np.array(
        [float(np.sum(np.asarray(v) != 0)) for v in strategy.experimental_local_results(batch[0])]
    )
    return result


def run_multi_worker(out_dir):
    from keras_transformer.distribute import get_strategy, multi_worker_fix_applied

    strategy = get_strategy()  # TF_CONFIG is set: MultiWorkerMirroredStrategy, fix applied
    assert isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy), type(strategy)
    assert multi_worker_fix_applied()
    import keras

    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    keras.utils.set_random_seed(1234)
    x, y = make_data()
    with strategy.scope():
        model, d_model = build_model()
        initial = model.get_weights()
        compile_model(model, d_model)
    result = train(model, make_dataset(x, y, shard_by_data=True))
    result["num_replicas"] = np.array(strategy.num_replicas_in_sync)
    result["max_weight_change"] = np.array(
        max(float(np.max(np.abs(a - b))) for a, b in zip(initial, model.get_weights(), strict=True))
    )
    np.savez(os.path.join(out_dir, f"worker_{task}.npz"), **result)


if __name__ == "__main__":
    mode, out = sys.argv[1], sys.argv[2]
    {"mirrored": run_mirrored, "multi_worker": run_multi_worker}[mode](out)
    print(f"{mode}: done")
