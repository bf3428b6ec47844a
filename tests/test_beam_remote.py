"""``keras-transformer prepare --runner beam`` with inputs and output on a file system the driver
does not mount, by options alone: the made-up scheme ``kttest://`` (``tests/_beam_kttest.py``, an
object-store-like Beam FileSystem over a temp folder) named by ``--beam_plugins``, as Dataflow
users name ``gs://``. The shards and manifest equal a local run's; nothing is written locally;
the process pool refuses a remote path in one line naming the argument."""

import collections
import json
import os

import apache_beam  # noqa: F401  (the beam extra: an ImportError names what to install)
import pytest

SPLITS = {"train": ("train", 2000), "validation": ("val", 300)}
COUNTS = ("pairs", "kept", "dropped", "source_tokens", "target_tokens", "num_shards", "shards")


def _small_corpus(multi30k_dir, folder):
    folder.mkdir(parents=True)
    for stem, lines in SPLITS.values():
        for lang in ("en", "de"):
            text = (multi30k_dir / f"{stem}.{lang}").read_text(encoding="utf-8").splitlines()
            (folder / f"{stem}.{lang}").write_text("\n".join(text[:lines]) + "\n", "utf-8")


def _inputs(base):
    args = []
    for split, (stem, _) in SPLITS.items():
        args += ["--source", f"{base}/{stem}.en", "--target", f"{base}/{stem}.de"]
        args += ["--split", split]
    return args


JOB = ["--vocab-size", "500", "--num-shards", "2", "--max-sentence-length", "40"]
PLUGIN = "--beam-options=--beam_plugins=tests._beam_kttest"


def _examples(files):
    import tensorflow as tf

    return collections.Counter(tf.data.TFRecordDataset(sorted(files)).as_numpy_iterator())


@pytest.fixture(scope="module")
def runs(tmp_path_factory, multi30k_dir, run_cli):
    """A local run (the pool, in this process) and the same job with every path on kttest://
    (Beam, a fresh process, 2 worker processes that must import the plugin themselves)."""
    from pipelines import prepare

    folder = tmp_path_factory.mktemp("beam_remote")
    root = folder / "fs"  # the backing store of kttest://
    _small_corpus(multi30k_dir, root / "corpus")
    local = folder / "local"
    args = [*_inputs(root / "corpus"), *JOB, "--workers", "1", "--output", str(local)]
    assert prepare.main(args) == 0
    (root / "out" / "prep").mkdir(parents=True)  # a stale temporary of a killed job, to go
    (root / "out" / "prep" / "train.tmp-1-deadbeef").mkdir()
    (root / "out" / "prep" / "train.tmp-1-deadbeef" / "train-00000-of-00002.tfrecord").write_bytes(
        b"partial"
    )
    cwd, tmp = folder / "cwd", folder / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    remote_args = [*_inputs("kttest://corpus"), *JOB, "--workers", "2", PLUGIN]
    result = run_cli(
        "prepare",
        "--runner",
        "beam",
        *remote_args,
        "--output",
        "kttest://out/prep",
        cwd=cwd,
        env={"KT_TEST_FS_ROOT": str(root), "TMPDIR": str(tmp)},
    )
    assert result.returncode == 0, result.stderr
    return {"local": local, "remote": root / "out" / "prep", "cwd": cwd, "tmp": tmp, "out": result}


def _files(folder):
    """The files under a folder (an object store keeps no empty folder: SavedModel's assets/)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def _manifest(folder):
    return json.loads((folder / "manifest.json").read_text())


def test_remote_shards_and_manifest_equal_a_local_run(runs):
    local, remote = _manifest(runs["local"]), _manifest(runs["remote"])
    # the tokenizer trained on the remote files' sample is the local one
    assert remote["tokenizer"]["model_sha256"] == local["tokenizer"]["model_sha256"]
    for split in SPLITS:
        for key in COUNTS:
            assert remote["splits"][split][key] == local["splits"][split][key], (split, key)
        assert remote["splits"][split]["runner"] == "beam"
        assert [i["sha256"] for i in remote["splits"][split]["inputs"]] == [
            i["sha256"] for i in local["splits"][split]["inputs"]
        ]
        assert remote["splits"][split]["inputs"][0]["path"].startswith("kttest://corpus/")
        names = remote["splits"][split]["shards"]
        assert _examples(runs["remote"] / n for n in names) == _examples(
            runs["local"] / n for n in names
        )
        sizes = [(runs["remote"] / n).stat().st_size for n in names]
        assert remote["splits"][split]["shard_bytes"] == sizes
    assert remote["splits"]["train"]["dropped"]["too_long"] > 0  # the filter did work
    assert _files(runs["remote"]) == _files(runs["local"])  # no temporary left, the stale one gone
    for name in ("sentencepiece.model", "tokenizer/assets.extra/sentencepiece.model"):
        assert (runs["remote"] / name).read_bytes() == (runs["local"] / name).read_bytes()


def test_nothing_is_written_locally_outside_temp_folders(runs):
    assert not list(runs["cwd"].iterdir())  # no "kttest:" folder made of a remote path
    assert not list(runs["tmp"].iterdir())  # the local tokenizer copy and options file removed


def test_the_remote_tokenizer_loads_back_as_folder_and_model_file(runs, monkeypatch):
    """What ``--tokenizer kttest://...`` reads; a path with no tokenizer is named."""
    import tests._beam_kttest  # noqa: F401 - registers kttest://, as --beam_plugins does
    from keras_transformer.text.tokenizer import SubwordTokenizer
    from pipelines.inputs import PrepareError
    from pipelines.remote import load_tokenizer_remote

    monkeypatch.setenv("KT_TEST_FS_ROOT", str(runs["remote"].parents[1]))
    local = SubwordTokenizer.load(runs["local"] / "tokenizer")
    for path in ("kttest://out/prep/tokenizer", "kttest://out/prep/sentencepiece.model"):
        assert load_tokenizer_remote(path).model_proto == local.model_proto, path
    with pytest.raises(PrepareError, match="--tokenizer kttest://out/none: no tokenizer there"):
        load_tokenizer_remote("kttest://out/none")
    assert SubwordTokenizer.load(runs["remote"] / "tokenizer").vocab_size == 500
    assert "wrote kttest://out/prep/manifest.json" in runs["out"].stdout


def _write(path, data: bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_remote_bad_inputs_give_the_local_named_errors(tmp_path, monkeypatch, capsys):
    """In this process (the plugin imported by --beam_plugins, as the command does): a remote
    missing file, line-count mismatch and non-UTF-8 line read as the local ones, path for path."""
    from pipelines import prepare

    root = tmp_path / "fs"
    monkeypatch.setenv("KT_TEST_FS_ROOT", str(root))
    for base in (root / "c", tmp_path / "c"):
        _write(base / "a.en", b"one\ntwo\nthree\n")
        _write(base / "a.de", b"eins\nzwei\n")
        _write(base / "b.de", b"eins\nzwei\n" + "drei Stra\u00dfe\n".encode("latin-1"))
    cases = {"line counts": ("a.en", "a.de"), "UTF-8": ("a.en", "b.de"), "missing": ("x", "a.de")}
    for name, (source, target) in cases.items():
        errors = []
        for base, output in (("kttest://c", "kttest://out"), (str(tmp_path / "c"), "")):
            output = output or str(tmp_path / "out")
            args = ["--source", f"{base}/{source}", "--target", f"{base}/{target}"]
            args += ["--vocab-size", "100", "--output", output, "--runner", "beam", PLUGIN]
            assert prepare.main(args) == 2, name
            lines = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
            assert len(lines) == 1, (name, lines)
            errors.append(lines[0].replace(base, "BASE"))
        assert errors[0] == errors[1], name
    assert not (root / "out").exists()  # a bad input writes nothing


def test_a_rerun_on_the_remote_output_reuses_everything(runs, monkeypatch, capsys):
    """In this process: the manifest, tokenizer and shard sizes are read back through the file
    system, so nothing is redone (no pipeline runs)."""
    from pipelines import prepare

    monkeypatch.setenv("KT_TEST_FS_ROOT", str(runs["remote"].parents[1]))
    before = {name: (runs["remote"] / name).read_bytes() for name in _files(runs["remote"])}
    args = [*_inputs("kttest://corpus"), *JOB, "--output", "kttest://out/prep"]
    assert prepare.main([*args, "--runner", "beam", PLUGIN]) == 0
    log = capsys.readouterr().out
    assert "tokenizer: up to date in kttest://out/prep/tokenizer" in log, log
    for split in SPLITS:
        assert f"{split}: up to date" in log, log
    after = {name: (runs["remote"] / name).read_bytes() for name in _files(runs["remote"])}
    assert sorted(after) == sorted(before)
    assert {k: v for k, v in after.items() if k != "manifest.json"} == {
        k: v for k, v in before.items() if k != "manifest.json"
    }
    manifest = _manifest(runs["remote"])
    assert all(manifest["splits"][split]["reused"] for split in SPLITS)


def test_the_process_pool_refuses_a_remote_path_naming_the_argument(tmp_path, run_cli, capsys):
    """A remote --source as a user types it (a fresh process), a remote --output in this one."""
    from pipelines import prepare

    (tmp_path / "a.de").write_text("eins\n")
    (tmp_path / "a.tsv").write_text("one\teins\n")
    args = ["--source", "kttest://c/a.en", "--target", tmp_path / "a.de"]
    result = run_cli("prepare", *args, "--output", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert prepare.main(["--tsv", str(tmp_path / "a.tsv"), "--output", "kttest://out"]) == 2
    for name, stderr in (("--source", result.stderr), ("--output", capsys.readouterr().err)):
        lines = [line for line in stderr.splitlines() if line.strip()]
        errors = [line for line in lines if "error" in line]
        assert len(errors) == 1, lines
        assert f"{name} kttest://" in errors[0] and "--runner beam" in errors[0], errors
    assert not os.path.exists(tmp_path / "out")
