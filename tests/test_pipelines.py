"""pipelines.prepare (tokenizer + TFRecord shards + manifest) and the Multi30k TFDS builder."""

import argparse
import hashlib
import json

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import data
from keras_transformer.text.tokenizer import SubwordTokenizer
from pipelines import prepare


def _manifest(output):
    return json.loads((output / "manifest.json").read_text())


def _head(src, dst, n):
    lines = src.read_text(encoding="utf-8").splitlines()[:n]
    dst.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return dst


@pytest.fixture()
def saved_tokenizer(multi30k_tokenizer, tmp_path):
    return multi30k_tokenizer.save(tmp_path / "saved_tokenizer")


def test_prepare_multi30k_then_rerun_reuses_everything(tmp_path, data_dir, multi30k_dir):
    output = tmp_path / "prepared"
    argv = [
        "--dataset",
        "multi30k",
        "--data-dir",
        str(data_dir),
        "--output",
        str(output),
        "--vocab-size",
        "8000",
        "--num-shards",
        "2",
    ]
    assert prepare.main(argv) == 0
    manifest = _manifest(output)
    assert manifest["tokenizer"]["vocab_size"] == 8000
    assert manifest["reserved_ids"] == {"pad": 0, "unk": 1, "bos": 2, "eos": 3}
    splits = manifest["splits"]
    assert {name: s["kept"] for name, s in splits.items()} == {
        "train": 29000,
        "validation": 1014,
        "test": 1000,
    }
    assert splits["train"]["dropped"] == {"empty": 0, "too_long": 0}
    source_input = splits["train"]["inputs"][0]
    assert source_input["path"] == str(multi30k_dir / "train.en")
    assert (
        source_input["sha256"]
        == hashlib.sha256((multi30k_dir / "train.en").read_bytes()).hexdigest()
    )
    assert splits["train"]["shards"] == [
        "train-00000-of-00002.tfrecord",
        "train-00001-of-00002.tfrecord",
    ]
    # The shards hold the corpus, in corpus order, tokenized by the saved tokenizer.
    tokenizer = SubwordTokenizer.load(output / "tokenizer")
    first = next(iter(data.read_tfrecord_shards(output, split="test")))
    english = (multi30k_dir / "test_2016_flickr.en").read_text().splitlines()[0]
    german = (multi30k_dir / "test_2016_flickr.de").read_text().splitlines()[0]
    assert first[0].numpy().tolist() == tokenizer.encode(english)
    assert first[1].numpy().tolist() == tokenizer.encode(german)
    assert (output / "sentencepiece.model").read_bytes() == tokenizer.model_proto
    # Same inputs again: nothing is rewritten.
    times = {p.name: p.stat().st_mtime_ns for p in output.glob("*.tfrecord")}
    tokenizer_time = (output / "tokenizer" / "saved_model.pb").stat().st_mtime_ns
    assert prepare.main(argv) == 0
    assert {p.name: p.stat().st_mtime_ns for p in output.glob("*.tfrecord")} == times
    assert (output / "tokenizer" / "saved_model.pb").stat().st_mtime_ns == tokenizer_time
    assert all(split["reused"] for split in _manifest(output)["splits"].values())


def test_the_installed_command_writes_shards_on_a_process_pool(
    tmp_path, multi30k_dir, saved_tokenizer
):
    """``keras-transformer prepare --executor process --workers 2`` as a user types it (the
    console script, whose spawned workers once recursed without end importing the package):
    the shards hold the pairs the in-process thread pool writes."""
    import pathlib
    import subprocess
    import sys

    from tests.conftest import fresh_process_environment

    command = pathlib.Path(sys.executable).with_name("keras-transformer")
    source = _head(multi30k_dir / "val.en", tmp_path / "small.en", 300)
    target = _head(multi30k_dir / "val.de", tmp_path / "small.de", 300)
    args = ["--source", str(source), "--target", str(target), "--tokenizer", saved_tokenizer]
    args += ["--num-shards", "2", "--workers", "2"]
    result = subprocess.run(
        [str(command), "prepare", *args, "--executor", "process", "--output", str(tmp_path / "p")],
        env=fresh_process_environment(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert prepare.main([*args, "--executor", "thread", "--output", str(tmp_path / "t")]) == 0
    for name in _manifest(tmp_path / "t")["splits"]["train"]["shards"]:
        assert (tmp_path / "p" / name).read_bytes() == (tmp_path / "t" / name).read_bytes()


def test_files_mode_counts_drops_reuses_tokenizer_and_reshards(
    tmp_path, multi30k_dir, saved_tokenizer, multi30k_tokenizer
):
    source = _head(multi30k_dir / "val.en", tmp_path / "small.en", 200)
    target = _head(multi30k_dir / "val.de", tmp_path / "small.de", 200)
    with source.open("a") as handle:
        handle.write("\n" + "word " * 80 + "\n")  # one empty pair, one too long
    with target.open("a") as handle:
        handle.write("Leer.\nLang.\n")
    dev_source = _head(multi30k_dir / "test_2016_flickr.en", tmp_path / "dev.en", 50)
    dev_target = _head(multi30k_dir / "test_2016_flickr.de", tmp_path / "dev.de", 50)
    output = tmp_path / "out"
    argv = [
        "--output",
        str(output),
        "--tokenizer",
        saved_tokenizer,
        "--max-length",
        "96",  # above every real pair here, below the added 80 words
        "--source",
        str(source),
        "--target",
        str(target),
        "--split",
        "train",
        "--source",
        str(dev_source),
        "--target",
        str(dev_target),
        "--split",
        "dev",
        "--workers",
        "2",
    ]
    assert prepare.main(argv + ["--num-shards", "3"]) == 0
    manifest = _manifest(output)
    assert (
        manifest["tokenizer"]["model_sha256"]
        == hashlib.sha256(multi30k_tokenizer.model_proto).hexdigest()
    )
    train = manifest["splits"]["train"]
    assert (train["pairs"], train["kept"], train["dropped"]) == (
        202,
        200,
        {"empty": 1, "too_long": 1},
    )
    assert manifest["splits"]["dev"]["kept"] == 50
    assert len(list(output.glob("train-*.tfrecord"))) == 3
    ids = list(data.read_tfrecord_shards(output, split="train").as_numpy_iterator())
    expected = list(
        data.tokenize_pairs(data.read_parallel_text(source, target), multi30k_tokenizer)
        .take(200)
        .as_numpy_iterator()
    )
    assert len(ids) == 200
    for (s1, t1), (s2, t2) in zip(ids, expected, strict=True):
        np.testing.assert_array_equal(s1, s2)
        np.testing.assert_array_equal(t1, t2)
    # each shard's kept pairs by the positions of their longer side with EOS, as its pairs say
    for name, counts in zip(train["shards"], train["kept_by_length"], strict=True):
        pairs = data.read_tfrecord_shards([output / name]).as_numpy_iterator()
        assert counts == np.bincount([max(len(s), len(t)) + 1 for s, t in pairs]).tolist()
    assert sum(map(sum, train["kept_by_length"])) == 200
    assert (
        sum(
            1
            for _ in data.make_dataset(
                data.read_tfrecord_shards(output, "dev"), None, 1024, max_sentence_length=96
            ).unbatch()
        )
        == 50
    )
    # Another shard count rewrites the split and leaves no shard of the old layout.
    assert prepare.main(argv + ["--num-shards", "1"]) == 0
    assert sorted(p.name for p in output.glob("train-*")) == ["train-00000-of-00001.tfrecord"]
    assert _manifest(output)["splits"]["dev"]["num_shards"] == 1


def test_killed_job_leaves_no_shard_that_reads_as_complete(
    tmp_path, multi30k_dir, saved_tokenizer, monkeypatch
):
    source = _head(multi30k_dir / "val.en", tmp_path / "k.en", 300)
    target = _head(multi30k_dir / "val.de", tmp_path / "k.de", 300)
    output = tmp_path / "out"
    argv = [
        "--output",
        str(output),
        "--tokenizer",
        saved_tokenizer,
        "--source",
        str(source),
        "--target",
        str(target),
        "--num-shards",
        "2",
        "--workers",
        "2",
    ]
    real = data.serialize_pair
    calls = []

    def dying(*args):
        calls.append(1)
        if len(calls) > 120:
            raise KeyboardInterrupt("killed mid-shard")
        return real(*args)

    monkeypatch.setattr(data, "serialize_pair", dying)
    with pytest.raises(KeyboardInterrupt):
        prepare.main(argv)
    assert not list(output.glob("*.tfrecord")) and not list(output.glob("*.tmp-*"))
    assert "train" not in _manifest(output)["splits"]
    with pytest.raises(data.MissingDataError):
        data.read_tfrecord_shards(output, split="train")
    # A SIGKILL leaves a temporary file: readers ignore it, the next run removes it.
    (output / "train-00000-of-00002.tfrecord.tmp-999-deadbeef").write_bytes(b"partial")
    monkeypatch.setattr(data, "serialize_pair", real)
    assert prepare.main(argv) == 0
    assert not list(output.glob("*.tmp-*"))
    assert sum(1 for _ in data.read_tfrecord_shards(output, split="train")) == 300


def test_bad_inputs_exit_2_with_a_clear_message(tmp_path, capsys):
    source = tmp_path / "x.en"
    source.write_text("a\nb\nc\n")
    target = tmp_path / "x.de"
    target.write_text("a\nb\n")
    code = prepare.main(
        [
            "--output",
            str(tmp_path / "o"),
            "--source",
            str(source),
            "--target",
            str(target),
            "--vocab-size",
            "100",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert str(source) in err and str(target) in err and "3 lines" in err and "2 lines" in err
    code = prepare.main(
        [
            "--output",
            str(tmp_path / "o"),
            "--source",
            str(tmp_path / "no.en"),
            "--target",
            str(target),
        ]
    )
    assert code == 2 and "no.en" in capsys.readouterr().err


def test_tfds_input(tmp_path, saved_tokenizer, multi30k_tokenizer):
    import tensorflow_datasets as tfds

    def as_dataset(self, split, *args, **kwargs):
        return tf.data.Dataset.from_tensor_slices(
            {"de": ["Ein Hund.", "Zwei Katzen.", ""], "en": ["A dog.", "Two cats.", "Empty"]}
        )

    output = tmp_path / "wmt"
    with tfds.testing.mock_data(as_dataset_fn=as_dataset):
        code = prepare.main(
            [
                "--tfds",
                "wmt14_translate/de-en",
                "--splits",
                "train",
                "--source-lang",
                "en",
                "--target-lang",
                "de",
                "--tfds-data-dir",
                str(tmp_path / "tfds"),
                "--tokenizer",
                saved_tokenizer,
                "--output",
                str(output),
            ]
        )
    assert code == 0
    train = _manifest(output)["splits"]["train"]
    assert train["kept"] == 2 and train["dropped"]["empty"] == 1
    assert train["inputs"][0]["tfds"] == "wmt14_translate/de-en"
    first = next(iter(data.read_tfrecord_shards(output, split="train")))
    assert first[0].numpy().tolist() == multi30k_tokenizer.encode("A dog.")


# ---------------------------------------------------------------------------- TFDS builder


def test_multi30k_builder_from_manual_dir(tmp_path, multi30k_dir, monkeypatch):
    import tensorflow_datasets as tfds

    from pipelines.multi30k import Multi30k

    def no_network(*args, **kwargs):
        raise AssertionError("the builder tried to download")

    monkeypatch.setattr(tfds.download.DownloadManager, "download_and_extract", no_network)
    monkeypatch.setattr(tfds.download.DownloadManager, "download", no_network)
    builder = Multi30k(data_dir=str(tmp_path / "tfds"))
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=str(multi30k_dir))
    )
    splits = {name: info.num_examples for name, info in builder.info.splits.items()}
    assert splits == {"train": 29000, "validation": 1014, "test": 1000}
    first = next(iter(builder.as_dataset(split="train")))
    assert first["en"].numpy().decode() == "Two young, White males are outside near many bushes."
    assert first["de"].numpy().decode() == (
        "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."
    )
    loaded = data.load_tfds("multi30k/en-de", "test", "de", "en", data_dir=tmp_path / "tfds")
    assert next(iter(loaded))[1].numpy().decode() == "A man in an orange hat starring at something."


def test_multi30k_builder_downloads_the_official_files(tmp_path, multi30k_dir, monkeypatch):
    import tensorflow_datasets as tfds

    from pipelines.multi30k import Multi30k
    from pipelines.multi30k.multi30k import SPLIT_FILES

    requested = {}

    def fake_download_and_extract(self, urls):
        requested.update(urls)
        local = {}
        for split, by_lang in urls.items():
            local[split] = {}
            for lang in by_lang:
                stem = SPLIT_FILES[split]
                local[split][lang] = _head(
                    multi30k_dir / f"{stem}.{lang}", tmp_path / f"{stem}.{lang}", 5
                )
        return local

    monkeypatch.setattr(
        tfds.download.DownloadManager, "download_and_extract", fake_download_and_extract
    )
    builder = Multi30k(data_dir=str(tmp_path / "tfds"))
    builder.download_and_prepare()
    base = "https://github.com/multi30k/dataset/raw/master/data/task1/raw/"
    assert requested["train"]["en"] == base + "train.en.gz"
    assert requested["test"]["de"] == base + "test_2016_flickr.de.gz"
    assert requested["validation"]["en"] == base + "val.en.gz"
    assert builder.info.splits["validation"].num_examples == 5


def test_parser_reuses_options_and_keeps_the_old_flag():
    parser = prepare.build_parser()
    new = parser.parse_args(["--output", "o", "--max-sentence-length", "64"])
    old = parser.parse_args(["--output", "o", "--max-length", "64"])
    assert new.max_sentence_length == old.max_sentence_length == 64
    assert parser.parse_args(["--output", "o"]).max_sentence_length == 256
    sub = prepare.add_arguments(argparse.ArgumentParser(prog="keras-transformer prepare"))
    assert vars(sub.parse_args(["--output", "o"])) == vars(parser.parse_args(["--output", "o"]))


def test_tfds_build_command_builds_multi30k_offline(tmp_path, multi30k_dir):
    """``tfds build`` as the builder's docstring says, in a fresh process, with every download
    sent to a closed port (it must need none)."""
    import os
    import pathlib
    import subprocess
    import sys

    import tensorflow_datasets as tfds

    from tests.conftest import REPO_ROOT

    dead = "http://127.0.0.1:9"
    environment = dict(os.environ, HTTP_PROXY=dead, HTTPS_PROXY=dead, PYTHONPATH=str(REPO_ROOT))
    environment.update(http_proxy=dead, https_proxy=dead, NO_PROXY="", no_proxy="")
    tfds_command = pathlib.Path(sys.executable).parent / "tfds"
    result = subprocess.run(
        [str(tfds_command), "build", "pipelines/multi30k", f"--manual_dir={multi30k_dir}"]
        + [f"--data_dir={tmp_path / 'tfds'}"],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    built = tfds.builder_from_directory(str(tmp_path / "tfds" / "multi30k" / "en-de" / "1.0.0"))
    splits = {name: info.num_examples for name, info in built.info.splits.items()}
    assert splits == {"train": 29000, "validation": 1014, "test": 1000}
    last = list(built.as_dataset(split="test").skip(999))[0]
    german = (multi30k_dir / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    assert last["de"].numpy().decode() == german[-1]
    assert not list((tmp_path / "tfds" / "downloads").glob("*.gz"))
