"""Training from prepared shards, as a user runs it: ``keras-transformer prepare`` then ``train``
with ``data.shards`` in the config, in fresh processes, on the real Multi30k files."""

import collections
import shutil

import yaml

MISSING_TEXT = "/nonexistent/multi30k"  # a run from shards must never open these


def _config(path, shards, **data):
    config = {
        "model": {"preset": "tiny"},
        "data": {
            "shards": str(shards),
            "train_source": f"{MISSING_TEXT}/train.en",
            "train_target": f"{MISSING_TEXT}/train.de",
            "validation_source": f"{MISSING_TEXT}/val.en",
            "validation_target": f"{MISSING_TEXT}/val.de",
            "tokens_per_batch": 512,
            "max_sentence_length": 64,
            **data,
        },
        "training": {
            "max_steps": 4,
            "steps_per_epoch": 2,
            "warmup_steps": 2,
            "keep_checkpoints": 1,
            "xla_loss": False,
        },
    }
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_config_with_shards_trains_and_never_opens_text(prepared, tmp_path, run_cli):
    config = _config(tmp_path / "shards.yaml", prepared / "shards")
    result = run_cli("train", "--config", config, "--run", tmp_path / "run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    run = tmp_path / "run"
    assert (run / "model.keras").is_file()
    from keras_transformer.text.tokenizer import SubwordTokenizer

    shards_tokenizer = SubwordTokenizer.load(prepared / "shards" / "tokenizer")
    assert SubwordTokenizer.load(run / "tokenizer").model_proto == shards_tokenizer.model_proto
    assert MISSING_TEXT not in result.stderr
    history = (run / "history.csv").read_text().splitlines()
    assert len(history) == 3 and "val_loss" in history[0]  # 2 epochs, validated on the shards


def test_the_shards_flag_of_train_overrides_the_config(prepared, tmp_path, run_cli):
    config = _config(tmp_path / "text.yaml", "unused")
    result = run_cli(
        "train",
        "--config",
        config,
        "--run",
        tmp_path / "run",
        "--shards",
        prepared / "shards",
        "training.max_steps=2",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "run" / "model.keras").is_file()


def test_shards_without_manifest_or_with_a_missing_shard_are_refused(prepared, tmp_path, run_cli):
    broken = tmp_path / "broken"
    shutil.copytree(prepared / "shards", broken)
    (broken / "manifest.json").rename(tmp_path / "manifest.json")
    result = run_cli("train", "--config", _config(tmp_path / "a.yaml", broken), cwd=tmp_path)
    assert result.returncode == 2 and "no manifest.json" in result.stderr, result.stderr
    assert str(broken) in result.stderr and "Traceback" not in result.stderr
    (tmp_path / "manifest.json").rename(broken / "manifest.json")
    next(broken.glob("train-*.tfrecord")).unlink()
    result = run_cli("train", "--config", _config(tmp_path / "b.yaml", broken), cwd=tmp_path)
    assert result.returncode == 2 and "'train' is incomplete" in result.stderr, result.stderr


def test_another_tokenizer_than_the_shards_one_is_refused_naming_both(prepared, tmp_path, run_cli):
    from keras_transformer.text.tokenizer import SubwordTokenizer

    other = tmp_path / "other_tokenizer"
    text = prepared / "text"
    SubwordTokenizer.train(
        [text / "train.en", text / "train.de"], vocab_size=500, output_dir=tmp_path / "build"
    ).save(other)
    config = _config(tmp_path / "c.yaml", prepared / "shards", tokenizer=str(other))
    result = run_cli("train", "--config", config, "--run", tmp_path / "run", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert str(other) in result.stderr and str(prepared / "shards") in result.stderr


def test_one_epoch_from_shards_holds_the_pairs_of_one_epoch_from_text(prepared):
    """Same tokenizer: the same multiset of (source, labels) id sequences, whatever the order."""
    from keras_transformer import data
    from keras_transformer.text.tokenizer import SubwordTokenizer

    tokenizer = SubwordTokenizer.load(prepared / "shards" / "tokenizer")
    text = prepared / "text"
    args = dict(tokens_per_batch=512, max_sentence_length=64, seed=3)
    from_text = data.make_dataset(
        data.read_parallel_text(text / "train.en", text / "train.de"), tokenizer, **args
    )
    from_shards = data.make_dataset(
        data.read_tfrecord_shards(prepared / "shards", "train"), tokenizer, **args
    )

    def pairs(dataset):
        found = collections.Counter()
        for inputs, labels in dataset:
            for source, target in zip(inputs["source"].numpy(), labels.numpy()):
                found[(tuple(source[source != 0]), tuple(target[target != 0]))] += 1
        return found

    expected = pairs(from_text)
    assert sum(expected.values()) > 1900  # a few long or empty pairs dropped
    assert pairs(from_shards) == expected


def test_a_resumed_stream_from_shards_in_parts_gives_the_batches_from_its_start(
    prepared, monkeypatch
):
    """``train``'s input from a prepared folder whose shards make two parts (segments of 900
    pairs here, a million by default): a start at batch b in either part, in any pass, gives
    the stream's batches from b, its segment found from the manifest alone."""
    import numpy as np

    from keras_transformer.data import segments
    from keras_transformer.text.tokenizer import SubwordTokenizer
    from keras_transformer.training import inputs
    from keras_transformer.training.run_config import DataSettings

    monkeypatch.setattr(segments, "SEGMENT_PAIRS", 900)
    settings = DataSettings(
        shards=str(prepared / "shards"), tokens_per_batch=512, max_sentence_length=64
    )
    parts = inputs._shard_parts(settings)
    # two parts of one shard each (1,000 pairs a shard, 900 a segment)
    assert [part.count for part in parts] == [sum(c) for c in _manifest_lengths(prepared)]
    per_part = [
        segments.batches_by_length(
            part.kept_by_length, passes=1, tokens_per_batch=512, max_sentence_length=64
        )
        for part in parts
    ]
    tokenizer = SubwordTokenizer.load(prepared / "shards" / "tokenizer")

    def labels(skip, count):
        stream = inputs.train_input(settings, tokenizer, skip=skip)
        return [batch[1].numpy() for batch in stream.take(count)]

    starts = [per_part[0] + 2, 2 * sum(per_part) + per_part[0] - 1]
    whole = labels(0, max(starts) + 3)
    for skip in starts:
        for expected, got in zip(whole[skip : skip + 3], labels(skip, 3), strict=True):
            np.testing.assert_array_equal(expected, got)


def _manifest_lengths(prepared):
    import json

    manifest = json.loads((prepared / "shards" / "manifest.json").read_text())
    return manifest["splits"]["train"]["kept_by_length"]
