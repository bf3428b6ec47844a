"""Every training setting a user can choose trains through ``train`` (a documented option must
never crash at its first step again), and gradient accumulation is the update of the whole batch.
"""

import csv
import datetime
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import build_transformer
from keras_transformer.config import ModelSettings
from keras_transformer.machine import machine_record
from keras_transformer.training import TrainingConfig, compile_model, train
from keras_transformer.training.run_config import TrainingSettings
from tests.conftest import small_multi30k


@pytest.fixture(scope="module")
def settings_config(tmp_path_factory, multi30k_dir, multi30k_tokenizer):
    folder = tmp_path_factory.mktemp("settings")
    paths = small_multi30k(multi30k_dir, folder, multi30k_tokenizer, 1500, 40)

    def make(training=None, data=None, model=None):
        return TrainingConfig.from_dict(
            {
                "model": {"preset": "tiny", "d_model": 32, "d_ff": 64, **(model or {})},
                "data": {
                    **paths,
                    "tokens_per_batch": 256,
                    "max_sentence_length": 24,
                    **(data or {}),
                },
                "training": {
                    "max_steps": 4,
                    "steps_per_epoch": 2,
                    "warmup_steps": 4,
                    "xla_loss": False,
                }
                | (training or {}),
            }
        )

    return make


# Every choice a user has in TrainingSettings / DataSettings (besides sizes and seeds), grouped
# into runs of settings that do not interact; the multi-worker strategy runs on the CLI below.
SETTINGS = {
    "accumulation_clipnorm_bf16_mirrored": (
        {
            "gradient_accumulation_steps": 2,
            "clipnorm": 0.5,
            "mixed_precision": "mixed_bfloat16",
            "strategy": "mirrored",
        },
        {},
    ),
    "jit_compile_no_validation": (
        {"jit_compile": True},
        {"validation_source": None, "validation_target": None},
    ),
    "run_control_default_strategy": (
        {
            "strategy": "default",
            "bleu_every_epochs": 1,
            "bleu_sentences": 8,
            "max_minutes": 5.0,
            "keep_checkpoints": 1,
            "backup_every_steps": 1,
            "deterministic": True,
            "lr_scale": 0.5,
            "label_smoothing": 0.0,
        },
        {},
    ),
}


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_each_setting_trains_through_train(name, settings_config, tmp_path):
    training, data = SETTINGS[name]
    run = tmp_path / "run"
    try:
        model = train(settings_config(training, data), run, verbose=0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    updates = 4 // training.get("gradient_accumulation_steps", 1)
    assert int(model.optimizer.iterations.numpy()) == updates
    finished = json.loads((run / "finished.json").read_text())
    here = machine_record()  # where and when it finished: this machine, this code, today
    assert finished["steps"] == updates and finished["trained"]["cpu"] == here["cpu"]
    assert finished["trained"]["commit"] == here["commit"]
    assert datetime.date.fromisoformat(finished["trained"]["date"]) <= datetime.date.today()
    history = (run / "history.csv").read_text().splitlines()
    assert len(history) == 3 and all("nan" not in row.split(",")[1] for row in history[1:])
    checkpoints = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert len(checkpoints) == min(2, training.get("keep_checkpoints", 20))  # one per epoch
    if "bleu_every_epochs" in training:
        assert "val_bleu" in history[0]
    if "mixed_precision" in training:
        assert model.layers[-1].dtype_policy.name == "mixed_bfloat16"


def test_multi_worker_with_accumulation_through_the_cli(settings_config, run_cli, tmp_path):
    """The documented override on the command line, under the multi-worker strategy (one
    local worker): both crashed at the first step before."""
    path = tmp_path / "config.yaml"
    settings_config({"strategy": "multi_worker"}).save(path)
    result = run_cli(
        "train",
        "--config",
        path,
        "--run",
        tmp_path / "run",
        "training.gradient_accumulation_steps=2",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "finished.json").read_text())["steps"] == 2


def _equal_token_batches(vocab, rows=4, length=9, seed=0):
    """Two micro-batches with the same number of real tokens (no padding) and different ids."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(2):
        ids = rng.integers(4, vocab, size=(rows, length + 1)).astype("int32")
        source = rng.integers(4, vocab, size=(rows, length)).astype("int32")
        batches.append(({"source": source, "target": ids[:, :-1]}, ids[:, 1:]))
    return batches


def _train_on(batches, accumulation, updates, strategy):
    keras.utils.set_random_seed(3)
    settings = {
        "preset": "tiny",
        "d_model": 32,
        "d_ff": 64,
        "dropout": 0.0,
        "attention_dropout": 0.0,
    }
    config = ModelSettings.from_dict(settings).model_config(64)
    with strategy.scope():
        model = build_transformer(config)
        settings = TrainingSettings(warmup_steps=4, gradient_accumulation_steps=accumulation)
        compile_model(model, settings)
    stream = [batches[i % len(batches)] for i in range(updates * len(batches))]
    features = {k: np.concatenate([b[0][k] for b in stream]) for k in ("source", "target")}
    labels = np.concatenate([b[1] for b in stream])
    rows = len(batches[0][1]) * len(batches) // accumulation
    dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(rows)
    model.fit(dataset, epochs=1, verbose=0, shuffle=False)
    return model


@pytest.mark.parametrize("strategy_kind", ["mirrored", "default"])
def test_two_micro_batches_make_the_update_of_the_batch_holding_both(strategy_kind):
    from keras_transformer.distribute import get_strategy

    batches = _equal_token_batches(vocab=64)
    strategy = get_strategy(strategy_kind)
    accumulated = _train_on(batches, accumulation=2, updates=3, strategy=strategy)
    whole = _train_on(batches, accumulation=1, updates=3, strategy=strategy)
    assert int(accumulated.optimizer.iterations.numpy()) == 3
    assert int(whole.optimizer.iterations.numpy()) == 3
    # Adam's moments are (decayed sums of) the gradients and their squares: equal moments mean
    # equal gradients at every update. The weights themselves are no test: Adam moves a weight
    # whose gradient is float noise (the attention key biases, which softmax ignores) by +-lr.
    # Tolerance: 1e-4 of the largest entry of that kind of slot (float32 sums in another order;
    # the key biases' moments are float noise of the scale of 1e-12).
    for slot in ("momentum", "velocity"):
        ours = [v for v in accumulated.optimizer.variables if v.path.endswith(slot)]
        theirs = [v for v in whole.optimizer.variables if v.path.endswith(slot)]
        assert ours and len(ours) == len(theirs) == len(accumulated.trainable_weights)
        scale = max(float(np.abs(np.asarray(b)).max()) for b in theirs)
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4 * scale)


def test_setting_names_are_all_covered():
    """A new TrainingSettings field must get a row above (or a reason here)."""
    import dataclasses

    covered = {key for training, _ in SETTINGS.values() for key in training}
    covered |= {"strategy"}  # multi_worker: the CLI test below
    covered |= {"init_from"}  # tests/test_commands.py: train --init-from in the command chain
    covered |= {"xla_loss"}  # test_the_plain_loss_switch_trains_as_the_xla_loss
    sizes_and_seeds = {"max_steps", "steps_per_epoch", "warmup_steps", "seed"}
    fields = {f.name for f in dataclasses.fields(TrainingSettings)}
    assert fields - covered - sizes_and_seeds == set()


def test_the_plain_loss_switch_trains_as_the_xla_loss(settings_config, run_cli, tmp_path):
    """``training.xla_loss``: the XLA-compiled loss and metrics (the default, through the Python
    API) and TF's plain kernels (``training.xla_loss=false`` on the command line over the same
    config file) give the same losses and metrics, step for step."""
    path = tmp_path / "config.yaml"
    settings_config({"xla_loss": True, "deterministic": True, "steps_per_epoch": 1}).save(path)
    train(TrainingConfig.load(path), tmp_path / "xla", verbose=0)
    result = run_cli(
        "train", "--config", path, "--run", tmp_path / "plain", "training.xla_loss=false",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    histories = {}
    for name in ("xla", "plain"):
        model = keras.models.load_model(tmp_path / name / "model.keras")
        assert model.loss.jit_compile == (name == "xla")
        with open(tmp_path / name / "history.csv") as handle:
            rows = list(csv.DictReader(handle))
        columns = ["loss", "masked_accuracy", "perplexity", "val_loss", "val_perplexity"]
        histories[name] = np.array([[float(row[c]) for c in columns] for row in rows])
    assert histories["xla"].shape == (4, 5)
    np.testing.assert_allclose(histories["plain"], histories["xla"], rtol=2e-5)
