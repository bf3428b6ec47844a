"""Real (short) training runs on Multi30k: the loss falls, killed runs resume, averaging is a
mean; run configs old and new; choosing the average and the BLEU curve on validation data."""

import csv
import pathlib

import keras
import numpy as np
import pytest

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.training import (
    TrainingConfig,
    average_checkpoints,
    list_checkpoints,
    load_run_model,
)


def _subset(src_dir, out_dir, lines):
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("train.en", "train.de"):
        text = (src_dir / name).read_text(encoding="utf-8").splitlines()[:lines]
        (out_dir / name).write_text("\n".join(text) + "\n", encoding="utf-8")
    for name in ("val.en", "val.de"):
        text = (src_dir / name).read_text(encoding="utf-8").splitlines()[:200]
        (out_dir / name).write_text("\n".join(text) + "\n", encoding="utf-8")
    return out_dir


@pytest.fixture(scope="module")
def tiny_run_config(tmp_path_factory, multi30k_dir, multi30k_tokenizer):
    data = _subset(multi30k_dir, tmp_path_factory.mktemp("multi30k_subset"), 4000)
    tokenizer_dir = tmp_path_factory.mktemp("tok") / "tokenizer"
    multi30k_tokenizer.save(tokenizer_dir)

    def make(**training):
        return TrainingConfig.from_dict(
            {
                "model": {
                    "preset": "tiny",
                    "d_model": 64,
                    "d_ff": 128,
                    "dropout": 0.0,
                    "max_positions": 64,
                },
                "data": {
                    "train_source": str(data / "train.en"),
                    "train_target": str(data / "train.de"),
                    "validation_source": str(data / "val.en"),
                    "validation_target": str(data / "val.de"),
                    "tokenizer": str(tokenizer_dir),
                    "tokens_per_batch": 1024,
                    "max_sentence_length": 48,
                },
                "training": {
                    "max_steps": 120,
                    "steps_per_epoch": 20,
                    "warmup_steps": 40,
                    "lr_scale": 0.5,
                    "keep_checkpoints": 3,
                    "xla_loss": False,
                    **training,
                },
            }
        )

    return make


def _history(run):
    with open(run / "history.csv") as handle:
        return list(csv.DictReader(handle))


def _context_free_loss(tokenizer, target_file, label_smoothing=0.1):
    """The lowest smoothed loss a model that ignores all context can reach on ``target_file``:
    with unigram frequencies ``f`` of the labels (tokens + EOS) and ``qbar = (1 - eps) f + eps / V``
    (the mean target distribution of section 5.4's smoothing), cross-entropy is lowest at
    ``p = qbar``, where it is the entropy of ``qbar``."""
    import tensorflow as tf

    from keras_transformer.text.tokenizer import EOS_ID

    lines = pathlib.Path(target_file).read_text(encoding="utf-8").splitlines()
    ids = tokenizer.tokenize(tf.constant(lines)).to_list()
    labels = np.concatenate([np.array([*row, EOS_ID]) for row in ids])
    frequencies = np.bincount(labels, minlength=tokenizer.vocab_size) / len(labels)
    qbar = (1.0 - label_smoothing) * frequencies + label_smoothing / tokenizer.vocab_size
    return float(-(qbar * np.log(qbar)).sum())


def _greedy_bleu(model, tokenizer, config, sentences):
    """sacreBLEU of the greedy translations of the first validation sentences (what the BLEU
    callback computes), from sacrebleu itself."""
    import sacrebleu

    from keras_transformer.evaluation import translate_sentences

    read = lambda path: pathlib.Path(path).read_text(encoding="utf-8").splitlines()[:sentences]
    sources, references = read(config.data.validation_source), read(config.data.validation_target)
    hypotheses = translate_sentences(model, tokenizer, sources, beam_size=1)
    assert all(hypotheses), hypotheses
    return sacrebleu.corpus_bleu(hypotheses, [references]).score


def test_loss_falls_on_real_multi30k(tiny_run_config, tmp_path):
    from keras_transformer.text.tokenizer import SubwordTokenizer
    from keras_transformer.training import train

    run = tmp_path / "run"
    config = tiny_run_config(bleu_every_epochs=3, bleu_sentences=16)
    model = train(config, run, verbose=0)
    history = _history(run)
    losses = [float(row["loss"]) for row in history]
    assert len(losses) == 6
    # Validation BLEU (sacreBLEU on greedy output) is logged every 3 epochs.
    assert [row["val_bleu"] != "nan" for row in history] == [False, False, True, False, False, True]
    # The last value is sacreBLEU of the final model's greedy output (1.90 on 2026-12-01).
    tokenizer = SubwordTokenizer.load(run / "tokenizer")
    bleu = _greedy_bleu(model, tokenizer, config, 16)
    assert float(history[-1]["val_bleu"]) == pytest.approx(bleu, rel=1e-6) and bleu > 0.5
    # The model learned more than token frequencies: its last epoch's loss (5.01 on 2026-12-01)
    # is well below the best loss of a context-free model on these targets (6.54).
    bound = _context_free_loss(tokenizer, config.data.train_target)
    assert losses[-1] < bound - 0.5 < losses[0], (losses, bound)
    assert float(history[-1]["masked_accuracy"]) > float(history[0]["masked_accuracy"])
    # Training tokens (not the validation count Keras leaves in the shared metric) and their rate.
    assert float(history[-1]["tokens"]) > 20 * 300
    assert 0 < float(history[-1]["tokens_per_second"]) < 1e6
    assert int(model.optimizer.iterations.numpy()) == 120
    # The run directory holds what export needs, and the last 3 checkpoints only.
    assert (run / "model.keras").exists() and (run / "tokenizer").exists()
    assert [p.name for p in list_checkpoints(run / "checkpoints")] == [
        "ckpt-00000080.weights.h5",
        "ckpt-00000100.weights.h5",
        "ckpt-00000120.weights.h5",
    ]
    assert (run / "logs").exists()


class _Interrupt(keras.callbacks.Callback):
    """Simulates a killed process in the middle of epoch ``at_epoch``."""

    def __init__(self, at_epoch):
        super().__init__()
        self.at_epoch = at_epoch

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch == self.at_epoch and batch == 5:
            raise KeyboardInterrupt("simulated kill")


def test_interrupted_run_resumes_at_the_step_it_reached(tiny_run_config, tmp_path):
    from keras_transformer.training import train

    run = tmp_path / "run"
    config = tiny_run_config(max_steps=100)
    with pytest.raises(KeyboardInterrupt):
        train(config, run, verbose=0, callbacks=[_Interrupt(at_epoch=3)])
    before = _history(run)
    assert [int(row["epoch"]) for row in before] == [0, 1, 2]
    # Epochs 0-2 finished (60 steps); the partial epoch 3 is lost, nothing earlier is.
    assert list_checkpoints(run / "checkpoints")[-1].name == "ckpt-00000060.weights.h5"

    resumed = train(tiny_run_config(max_steps=100), run, verbose=0)
    after = _history(run)
    assert [int(row["epoch"]) for row in after] == [0, 1, 2, 3, 4]
    assert int(resumed.optimizer.iterations.numpy()) == 100
    losses = [float(row["loss"]) for row in after]
    # The resumed epoch continues the curve rather than starting from an untrained model.
    assert losses[3] < losses[0] and losses[3] < 1.1 * losses[2], losses
    assert not (run / "backup").exists()  # deleted once the run finished
    # Running a finished run again trains no further.
    again = train(tiny_run_config(max_steps=100), run, verbose=0)
    assert int(again.optimizer.iterations.numpy()) == 100 and len(_history(run)) == 5
    # Other training settings are fine; other data or model settings would give the old model.
    train(tiny_run_config(max_steps=200, keep_checkpoints=5), run, verbose=0)
    other_data = tiny_run_config(max_steps=100)
    other_data.data.tokens_per_batch = 512
    with pytest.raises(ValueError, match=r"run.*data\.tokens_per_batch: 1024 in the run, 512 now"):
        train(other_data, run, verbose=0)
    other_model = tiny_run_config(max_steps=100)
    other_model.model.d_model = 32
    with pytest.raises(ValueError, match=r"model\.d_model: 64 in the run, 32 now"):
        train(other_model, run, verbose=0)


def test_average_of_checkpoints_is_the_mean_of_their_weights(tmp_path):
    config = TrainingConfig.from_dict({"model": TransformerConfig.tiny(40).to_dict()})
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    config.save(run / "config.yaml")
    model = build_transformer(TransformerConfig.tiny(40))
    rng = np.random.default_rng(0)
    saved = []
    for step in (10, 20, 30, 40):
        weights = [rng.normal(size=w.shape).astype("float32") for w in model.get_weights()]
        model.set_weights(weights)
        model.save_weights(run / "checkpoints" / f"ckpt-{step:08d}.weights.h5")
        saved.append(weights)
    averaged = average_checkpoints(run, last=3)
    for got, *inputs in zip(averaged.get_weights(), *saved[1:], strict=True):
        np.testing.assert_allclose(got, np.mean(inputs, axis=0), rtol=1e-6, atol=1e-6)
    reloaded = keras.models.load_model(run / "averaged.keras", compile=False)
    for a, b in zip(reloaded.get_weights(), averaged.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(FileNotFoundError, match="no checkpoints"):
        average_checkpoints(tmp_path / "empty", last=2)


def test_training_config_errors_name_the_file_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("training:\n  max_stepz: 10\n")
    with pytest.raises(ValueError, match=r"bad\.yaml.*max_stepz"):
        TrainingConfig.load(path)
    with pytest.raises(ValueError, match="section.field=value"):
        TrainingConfig.load(_write(tmp_path), ["max_steps=3"])


def test_exponent_floats_read_as_numbers_in_files_and_overrides(tmp_path):
    """YAML 1.1 (PyYAML) reads ``1e-4`` as a string; a float field takes it as 0.0001."""
    path = tmp_path / "rates.yaml"
    path.write_text("training:\n  lr_scale: 5e-1\n  clipnorm: 1E+0\n")
    config = TrainingConfig.load(path, ["training.max_minutes=2.5e1"])
    assert (config.training.lr_scale, config.training.clipnorm) == (0.5, 1.0)
    assert config.training.max_minutes == 25.0
    with pytest.raises(ValueError, match=r"training\.seed=1000\.0 is not of type int"):
        TrainingConfig.load(path, ["training.seed=1e3"])
    with pytest.raises(ValueError, match="training.lr_scale='1e-x'"):
        TrainingConfig.load(path, ["training.lr_scale=1e-x"])


def _write(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("training:\n  max_steps: 10\n")
    return path


def test_shipped_configs_load():
    """Every training config in configs/ loads and builds; ablation plans (``config:`` naming
    their base) list their rows over a base config that does."""
    import yaml

    from keras_transformer.table3.ablate import ablation_plan

    root = pathlib.Path(__file__).resolve().parents[1] / "configs"
    plans = 0
    for path in sorted(root.glob("*.yaml")):
        if "config" in yaml.safe_load(path.read_text()):
            plans += 1
            assert len(ablation_plan(plan=path)) > 2, path
            continue
        config = TrainingConfig.load(path)
        assert config.model_config(8000).d_model % config.model_config(8000).num_heads == 0
    assert plans == 1


def test_training_config_reads_old_key_names_and_keeps_the_yaml_shape(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("model:\n  preset: tiny\n  max_length: 48\ndata:\n  max_length: 40\n")
    config = TrainingConfig.load(path, ["training.max_steps=3"])
    assert (config.model.max_positions, config.data.max_sentence_length) == (48, 40)
    assert config.model_config(100).max_positions == 48
    assert config.to_dict()["model"] == {"preset": "tiny", "max_positions": 48}
    assert TrainingConfig.load(path, ["data.max_length=30"]).data.max_sentence_length == 30
    with pytest.raises(ValueError, match=r"old\.yaml.*max_sentence_length"):
        TrainingConfig.load(path, ["data.max_sentence_length=30"])  # both names at once
    with pytest.raises(ValueError, match=r"old\.yaml.*unknown field.*num_layer\b.*'model'"):
        TrainingConfig.load(path, ["model.num_layer=3"])
    assert TrainingConfig(model={"preset": "tiny"}).model.preset == "tiny"  # a plain dict is read
    assert TrainingConfig().model_config(100).d_model == TransformerConfig.small(100).d_model


def _old_run_dir(tmp_path, config):
    """A run directory as the code before the renames wrote it (``max_length`` keys)."""
    import yaml

    values = config.to_dict()
    values["model"] = config.model_config(40).to_dict()
    values["model"]["max_length"] = values["model"].pop("max_positions")
    values["data"]["max_length"] = values["data"].pop("max_sentence_length")
    run = tmp_path / "old_run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(values, sort_keys=False))
    model = build_transformer(config.model_config(40))
    model.save_weights(run / "checkpoints" / "ckpt-00000010.weights.h5")
    return run


def test_old_run_directories_load_and_match_the_new_key_names(tmp_path):
    from keras_transformer.model import model_dims
    from keras_transformer.training import check_same_run

    config = TrainingConfig.from_dict(
        {"model": {"preset": "tiny", "max_positions": 48}, "data": {"max_sentence_length": 40}}
    )
    run = _old_run_dir(tmp_path, config)
    check_same_run(config, run)  # the same settings under the new names
    other = TrainingConfig.from_dict(
        {"model": {"preset": "tiny", "max_positions": 32}, "data": {"max_sentence_length": 40}}
    )
    with pytest.raises(ValueError, match=r"model\.max_positions: 48 in the run, 32 now"):
        check_same_run(other, run)
    other = TrainingConfig.from_dict(
        {"model": {"preset": "tiny", "max_positions": 48}, "data": {"max_sentence_length": 30}}
    )
    with pytest.raises(ValueError, match=r"data\.max_sentence_length: 40 in the run, 30 now"):
        check_same_run(other, run)
    model = load_run_model(run)  # no model.keras: the last checkpoint
    assert model_dims(model)["max_positions"] == 48


def test_load_run_model_names_a_folder_that_is_not_a_run(tmp_path):
    from keras_transformer.training import NotARunDirectoryError

    with pytest.raises(NotARunDirectoryError, match=r"not a run directory"):
        load_run_model(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no such run directory"):
        load_run_model(tmp_path / "missing")


def test_compile_model_takes_d_model_from_the_model():
    from keras_transformer.training import TrainingSettings, compile_model

    model = build_transformer(TransformerConfig.tiny(40, d_model=32))
    compile_model(model, TrainingSettings(warmup_steps=10, lr_scale=2.0))
    # Step 1 of the warmup schedule: scale * d_model^-0.5 * 1 * warmup^-1.5 (section 5.3).
    expected = 2.0 * 32**-0.5 * 10**-1.5
    np.testing.assert_allclose(float(model.optimizer.learning_rate), expected, rtol=1e-5)


@pytest.fixture(scope="module")
def checkpointed_run(tmp_path_factory, multi30k_dir, multi30k_tokenizer, run_cli):
    """A run directory of a tiny model trained 300 steps by ``train`` (3 epochs of 100), with
    the checkpoints of steps 200 and 300 (the first one pruned) and a history.csv whose epochs
    end at 1.5, 3.0 and 4.5 minutes. Trained this far, not random: greedy translations of random
    weights are one repeated piece (a single word), and after 60 steps "Ein.", on which every
    checkpoint scores 0 BLEU (no 4-gram); after 200 and 300 steps they are sentences of a dozen
    words, different ones, so scores against one checkpoint's translations tell them apart."""
    import yaml

    from tests.conftest import small_multi30k

    folder = tmp_path_factory.mktemp("checkpointed")
    data = small_multi30k(multi30k_dir, folder, multi30k_tokenizer, 800, 20)
    training = {"max_steps": 300, "steps_per_epoch": 100, "warmup_steps": 50, "keep_checkpoints": 2}
    model = {"preset": "tiny", "d_model": 32, "d_ff": 64, "dropout": 0.0}
    config = dict(model=model, data=data, training=training)
    (folder / "tiny.yaml").write_text(yaml.safe_dump(config))
    run = folder / "run"
    result = run_cli("train", "--config", folder / "tiny.yaml", "--run", run, cwd=folder)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = "".join(f"{epoch},1.0,{minutes}\n" for epoch, minutes in ((0, 1.5), (1, 3.0), (2, 4.5)))
    (run / "history.csv").write_text("epoch,loss,train_minutes\n" + rows)
    return run


def _greedy_translations(run, weights, sources):
    from keras_transformer.evaluation import translate_sentences
    from keras_transformer.text.tokenizer import SubwordTokenizer

    tokenizer = SubwordTokenizer.load(run / "tokenizer")
    model = load_run_model(run, weights) if not isinstance(weights, keras.Model) else weights
    return translate_sentences(model, tokenizer, sources, beam_size=1)


def test_average_choose_on_val_keeps_the_best_on_validation(
    checkpointed_run, multi30k_dir, tmp_path, run_cli
):
    """``keras-transformer average --choose-on-val``: the references are the greedy
    translations of the last checkpoint, so the average of the last 1 scores 100 and that of
    the last 2 less: the command keeps the last 1, given last among the candidates, records
    both scores and writes it to ``averaged.keras``."""
    import json

    from keras_transformer.text.lines import read_lines

    run = checkpointed_run
    sources = read_lines(multi30k_dir / "val.en", 4)
    expected = average_checkpoints(run, last=1, output=tmp_path / "expected.keras")
    (tmp_path / "val.en").write_text("".join(line + "\n" for line in sources), "utf-8")
    references = _greedy_translations(run, expected, sources)
    (tmp_path / "val.de").write_text("".join(line + "\n" for line in references), "utf-8")
    result = run_cli("average", "--run", run, "--choose-on-val", "--src", tmp_path / "val.en",
                     "--ref", tmp_path / "val.de", "--candidates", 2, 1, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "chosen: average of the last 1 checkpoints" in result.stdout
    choice = json.loads((run / "average_choice.json").read_text())
    scores = {int(k): v for k, v in choice["validation_bleu_by_last_n"].items()}
    assert choice["chosen_last_n"] == 1, scores
    assert scores[1] == pytest.approx(100) and scores[2] < 99, scores
    averaged = keras.models.load_model(run / "averaged.keras", compile=False)
    for a, b in zip(averaged.get_weights(), expected.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_bleu_curve_scores_each_kept_checkpoint_at_its_minutes(
    checkpointed_run, multi30k_dir, tmp_path
):
    from keras_transformer.text.lines import read_lines
    from keras_transformer.training import bleu_curve, checkpoint_at_minutes, history

    rows = history(checkpointed_run)
    assert checkpoint_at_minutes(checkpointed_run, rows, 1.6) is None  # step 100 was pruned
    path, minutes = checkpoint_at_minutes(checkpointed_run, rows, 3.5)
    assert (path.name, minutes) == ("ckpt-00000200.weights.h5", 3.0)
    sources = read_lines(multi30k_dir / "val.en", 3)
    # The references: the translations of the step-300 checkpoint, which scores 100 on them and
    # the other less (on real references both score near 0, where rows swapped would pass).
    references = _greedy_translations(
        checkpointed_run, checkpointed_run / "checkpoints" / "ckpt-00000300.weights.h5", sources
    )
    written = bleu_curve(checkpointed_run, sources, references, tmp_path / "curve.csv", beam_size=1)
    with open(tmp_path / "curve.csv") as handle:
        assert list(csv.DictReader(handle)) == written
    assert [(r["checkpoint"], r["train_minutes"]) for r in written] == [
        ("ckpt-00000200.weights.h5", "3.00"),
        ("ckpt-00000300.weights.h5", "4.50"),
    ]
    assert float(written[0]["bleu"]) < 100 and written[1]["bleu"] == "100.00"
    # Each row is sacreBLEU of that checkpoint's own greedy translations.
    import sacrebleu

    from keras_transformer.evaluation import translate_sentences
    from keras_transformer.text.tokenizer import SubwordTokenizer

    tokenizer = SubwordTokenizer.load(checkpointed_run / "tokenizer")
    for row in written:
        model = load_run_model(
            checkpointed_run, checkpointed_run / "checkpoints" / row["checkpoint"]
        )
        hypotheses = translate_sentences(model, tokenizer, sources, beam_size=1)
        expected = sacrebleu.corpus_bleu(hypotheses, [references]).score
        assert row["bleu"] == f"{expected:.2f}"
