"""Training from a prepared folder on a remote file system, read in place through ``tf.io.gfile``.

TensorFlow's in-memory file system ``ram://`` stands in for ``gs://``: it lives inside one
process, so a fresh Python process copies the prepared folder there and runs the command line's
``main`` itself, as ``keras-transformer train ... data.shards=ram://...`` would."""

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import yaml

from tests.conftest import fresh_process_environment

# Runs in a fresh process: argv = prepared folder, work folder; prints one JSON line.
SCRIPT = textwrap.dedent(
    """
    import contextlib, io, json, os, sys
    import tensorflow as tf
    from keras_transformer.cli import main

    local, work = sys.argv[1:3]

    def copy(source, target, leave_out=()):
        for folder, _, names in tf.io.gfile.walk(source):
            into = target + folder[len(source):]
            tf.io.gfile.makedirs(into)
            for name in names:
                if name not in leave_out:
                    tf.io.gfile.copy(os.path.join(folder, name), f"{into}/{name}")

    def train(run, shards):
        config = os.path.join(work, "config.yaml")
        errors = io.StringIO()
        with contextlib.redirect_stderr(errors):
            code = main(["train", "--config", config, "--run", run, f"data.shards={shards}"])
        return [code, errors.getvalue().strip()]

    shard = "train-00000-of-00002.tfrecord"
    copy(local, "ram://prep/m30k")
    copy(local, "ram://prep/no_manifest", leave_out=("manifest.json",))
    copy(local, "ram://prep/no_shard", leave_out=(shard,))
    copy(local, work + "/no_manifest", leave_out=("manifest.json",))
    copy(local, work + "/no_shard", leave_out=(shard,))
    result = {"local": train(work + "/run_local", local)}
    result["remote"] = train(work + "/run_remote", "ram://prep/m30k")
    for case in ("no_manifest", "no_shard", "missing"):
        result[case] = {
            "local": train(f"{work}/run_{case}", f"{work}/{case}"),
            "remote": train(f"{work}/run_{case}", f"ram://prep/{case}"),
        }
    print(json.dumps(result))
    """
)


def _config(path):
    config = {
        "model": {"preset": "tiny"},
        "data": {"tokens_per_batch": 512, "max_sentence_length": 64},
        "training": {
            "max_steps": 3,
            "steps_per_epoch": 3,
            "warmup_steps": 2,
            "keep_checkpoints": 1,
            "deterministic": True,
            "seed": 7,
            "xla_loss": False,
        },
    }
    path.write_text(yaml.safe_dump(config))


def _run(prepared, tmp_path) -> dict:
    _config(tmp_path / "config.yaml")
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(prepared / "shards"), str(tmp_path)],
        cwd=tmp_path,
        env=fresh_process_environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _weights(path):
    import keras

    import keras_transformer.model  # noqa: F401 (registers the layers)

    return keras.models.load_model(path, compile=False).get_weights()


def test_training_from_a_remote_folder_is_training_from_its_local_copy(prepared, tmp_path):
    result = _run(prepared, tmp_path)
    assert result["local"] == [0, ""] and result["remote"] == [0, ""], result
    local, remote = tmp_path / "run_local", tmp_path / "run_remote"
    for run in (local, remote):
        assert json.loads((run / "finished.json").read_text())["steps"] == 3
        assert not list(run.rglob("*.tfrecord"))  # the shards were read in place
    assert (remote / "tokenizer").is_dir()  # the shards' tokenizer, saved into the run
    local_history = (local / "history.csv").read_text().splitlines()
    remote_history = (remote / "history.csv").read_text().splitlines()
    assert local_history[0] == remote_history[0] and "val_loss" in local_history[0]
    columns = local_history[0].split(",")
    for name in ("loss", "val_loss"):
        at = columns.index(name)
        values = [float(row.split(",")[at]) for row in (local_history[1], remote_history[1])]
        np.testing.assert_allclose(values[0], values[1], rtol=1e-6)
    for a, b in zip(_weights(local / "model.keras"), _weights(remote / "model.keras")):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)

    # Bad remote input: the one-line error of the same local input, exit status 2.
    work = str(tmp_path)
    for case in ("no_manifest", "no_shard", "missing"):
        local_code, local_error = result[case]["local"]
        remote_code, remote_error = result[case]["remote"]
        assert local_code == remote_code == 2, result[case]
        assert remote_error == local_error.replace(f"{work}/{case}", f"ram://prep/{case}")
        assert remote_error.startswith("keras-transformer train: error: ")
        assert f"ram://prep/{case}" in remote_error and str(tmp_path) not in remote_error
        assert "\n" not in remote_error and "Traceback" not in remote_error
    assert "no manifest.json" in result["no_manifest"]["remote"][1]
    assert "'train' is incomplete" in result["no_shard"]["remote"][1]
    assert result["missing"]["remote"][1].endswith("ram://prep/missing: no such folder")


def test_shards_and_tokenizer_read_from_a_url_are_those_of_the_local_folder(prepared):
    import tensorflow as tf

    from keras_transformer import data
    from keras_transformer.text.tokenizer import SubwordTokenizer

    local = prepared / "shards"
    for path in local.rglob("*"):
        target = f"ram://same/{path.relative_to(local).as_posix()}"
        if path.is_dir():
            tf.io.gfile.makedirs(target)
        else:
            tf.io.gfile.copy(str(path), target, overwrite=True)
    files = data.shard_files("ram://same/", "validation")
    assert files == [f"ram://same/validation-0000{i}-of-00002.tfrecord" for i in range(2)]

    def pairs(dataset):
        return [(tuple(s.numpy()), tuple(t.numpy())) for s, t in dataset]

    remote = pairs(data.read_tfrecord_shards("ram://same", "validation"))
    assert remote == pairs(data.read_tfrecord_shards(local, "validation")) and len(remote) > 150
    tokenizer = SubwordTokenizer.load("ram://same/tokenizer")
    assert tokenizer.model_proto == SubwordTokenizer.load(local / "tokenizer").model_proto


def test_text_at_a_url_and_a_file_system_tensorflow_lacks_are_refused_naming_them():
    from keras_transformer.text.lines import DataError
    from keras_transformer.training import TrainingConfig
    from keras_transformer.training.inputs import check_inputs
    from keras_transformer.training.shards import ShardsError

    text = TrainingConfig.from_dict({"model": {"preset": "tiny"}})
    text.data.train_source = "gs://bucket/wmt/train.en"
    with pytest.raises(DataError, match=r"^data.train_source=gs://bucket/wmt/train.en: text corp"):
        check_inputs(text)
    text.data.shards = "nofs://bucket/prep/"
    with pytest.raises(ShardsError, match=r"^data.shards=nofs://bucket/prep: no nofs:// file sys"):
        check_inputs(text)
