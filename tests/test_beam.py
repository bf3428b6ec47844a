"""``keras-transformer prepare --runner beam`` (pipelines.beam) against the process-pool path, as a
user runs both: fresh processes, the real Multi30k files, Beam's local FnApiRunner."""

import collections
import json

import apache_beam  # noqa: F401  (the beam extra: an ImportError names what to install)
import numpy as np
import pytest
import yaml

from keras_transformer.data import read_tfrecord_shards
from keras_transformer.data.segments import add_length_counts


def _manifest(folder):
    return json.loads((folder / "manifest.json").read_text())


def _examples(folder, split):
    """The split's records as a multiset (``serialize_pair`` is deterministic: equal bytes are
    equal id pairs)."""
    import tensorflow as tf

    from keras_transformer import data

    records = tf.data.TFRecordDataset(data.shard_files(folder, split))
    return collections.Counter(records.as_numpy_iterator())


COUNTS = ("pairs", "kept", "dropped", "source_tokens", "target_tokens", "num_shards", "shards")


@pytest.fixture(scope="module")
def both(tmp_path_factory, multi30k_dir, multi30k_tokenizer, run_cli):
    """Multi30k train + validation prepared by the pool and by Beam (2 workers each)."""
    folder = tmp_path_factory.mktemp("beam_vs_pool")
    tokenizer = multi30k_tokenizer.save(folder / "tokenizer")
    common = ["--dataset", "multi30k", "--data-dir", multi30k_dir.parent]
    common += ["--splits", "train,validation", "--tokenizer", tokenizer, "--num-shards", 2]
    common += ["--workers", 2, "--max-sentence-length", 40]
    outputs = {}
    for runner in ("pool", "beam"):
        outputs[runner] = folder / runner
        result = run_cli(
            "prepare", *common, "--runner", runner, "--output", outputs[runner], cwd=folder
        )
        assert result.returncode == 0, result.stderr
    return outputs


def test_beam_shards_hold_the_pool_examples_with_the_same_manifest(both):
    pool, beam = _manifest(both["pool"]), _manifest(both["beam"])
    assert pool["tokenizer"]["model_sha256"] == beam["tokenizer"]["model_sha256"]
    assert beam["splits"]["train"]["runner"] == "beam"
    for split in ("train", "validation"):
        for key in COUNTS:
            assert beam["splits"][split][key] == pool["splits"][split][key], (split, key)
        expected = _examples(both["pool"], split)
        assert _examples(both["beam"], split) == expected
    train = beam["splits"]["train"]
    assert train["pairs"] == 29000 and train["dropped"]["too_long"] > 0  # the filter did work
    # the shards hold other pairs on each runner (Beam: whole chunks), the same by length in all,
    # and each shard's kept pairs by length are its records'
    pool_lengths = pool["splits"]["train"]["kept_by_length"]
    assert add_length_counts(*train["kept_by_length"]) == add_length_counts(*pool_lengths)
    for name, counts in zip(train["shards"], train["kept_by_length"], strict=True):
        pairs = read_tfrecord_shards([both["beam"] / name]).as_numpy_iterator()
        assert counts == np.bincount([max(len(s), len(t)) + 1 for s, t in pairs]).tolist()
    assert sum(_examples(both["beam"], "train").values()) == train["kept"]
    assert train["shards"] == ["train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]
    assert sorted(p.name for p in both["beam"].iterdir()) == sorted(
        p.name for p in both["pool"].iterdir()
    )  # no temporary left behind


def test_training_runs_from_beam_shards(both, tmp_path, run_cli):
    config = {
        "model": {"preset": "tiny"},
        "data": {"tokens_per_batch": 512, "max_sentence_length": 40},
        "training": {"max_steps": 3, "steps_per_epoch": 3, "warmup_steps": 2, "xla_loss": False},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    run = tmp_path / "run"
    result = run_cli(
        "train", "--config", path, "--shards", both["beam"], "--run", run, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert (run / "model.keras").is_file()
    history = (run / "history.csv").read_text().splitlines()
    assert len(history) == 2 and "val_loss" in history[0]


def _bad_inputs(tmp_path):
    short_en = tmp_path / "short.en"
    short_en.write_text("one\ntwo\nthree\n", encoding="utf-8")
    short_de = tmp_path / "short.de"
    short_de.write_text("eins\nzwei\n", encoding="utf-8")
    latin = tmp_path / "latin.de"
    latin.write_bytes(b"eins\nzwei\n" + "drei Stra\u00dfe\n".encode("latin-1"))
    return {
        "line counts": ([short_en, short_de], [str(short_en), "3 lines", "2 lines"]),
        "not UTF-8": ([short_en, latin], [f"{latin}, line 3: not valid UTF-8"]),
        "missing file": ([tmp_path / "absent.en", short_de], ["not found", "absent.en"]),
    }


def test_bad_inputs_give_the_same_named_errors_on_both_runners(
    tmp_path, multi30k_tokenizer, run_cli, capsys
):
    """Beam in a fresh process as a user types it; the pool path's same command in this one."""
    from pipelines import prepare

    tokenizer = multi30k_tokenizer.save(tmp_path / "tokenizer")
    for name, (files, expected) in _bad_inputs(tmp_path).items():
        args = ["--source", files[0], "--target", files[1], "--tokenizer", tokenizer]
        args += ["--output", tmp_path / f"out-{name}"]
        result = run_cli("prepare", *args, "--runner", "beam", cwd=tmp_path)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        beam_error = [line for line in result.stderr.splitlines() if "error" in line]
        assert prepare.main([*map(str, args), "--runner", "pool"]) == 2
        pool_error = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
        assert beam_error == pool_error and len(beam_error) == 1, (name, beam_error, pool_error)
        for part in expected:
            assert part in beam_error[0], (name, part, beam_error)
        assert not (tmp_path / f"out-{name}").exists() or not list(
            (tmp_path / f"out-{name}").glob("*.tfrecord")
        )


def test_a_chunk_keeps_the_line_pairing_and_names_a_line_that_changed(tmp_path):
    from keras_transformer.text.lines import DataError
    from pipelines import beam
    from pipelines.inputs import files_spec, tsv_spec

    source = tmp_path / "a.en"
    target = tmp_path / "a.de"
    source.write_bytes(b"".join(b"en %d\r\n" % i for i in range(10)))
    target.write_bytes(b"".join(b"de %d\n" % i for i in range(10)))
    spec = files_spec("train", source, target)
    chunks = beam.plan_chunks(spec, 10, chunk_lines=4)
    assert [(c["start"], c["lines"]) for c in chunks] == [(0, 4), (4, 4), (8, 2)]
    assert beam.read_chunk(spec, chunks[1]) == (
        [f"en {i}" for i in range(4, 8)],
        [f"de {i}" for i in range(4, 8)],
    )
    tsv = tmp_path / "a.tsv"
    tsv.write_text("".join(f"x\tsrc {i}\ttgt {i}\n" for i in range(5)), encoding="utf-8")
    tsv_chunks = beam.plan_chunks(tsv_spec("train", tsv, 1, 2), 5, chunk_lines=2)
    assert beam.read_chunk(tsv_spec("train", tsv, 1, 2), tsv_chunks[2]) == (["src 4"], ["tgt 4"])
    target.write_bytes(b"de 0\nde 1\nde 2\nde 3\nde 4\nde \xff\n")  # changed after validation
    with pytest.raises(DataError, match=r"a\.de, line 6: not valid UTF-8"):
        beam.read_chunk(spec, chunks[1])
    with pytest.raises(DataError, match="shorter than when validated \\(no line 9\\)"):
        beam.read_chunk(spec, chunks[2])


def test_the_local_runner_is_named_unless_the_options_name_one():
    from pipelines import beam

    local = beam.pipeline_options(None, 2).get_all_options()
    assert (local["runner"], local["direct_num_workers"], local["direct_running_mode"]) == (
        "FnApiRunner",
        2,
        "multi_processing",
    )
    assert beam.pipeline_options("", 1).get_all_options()["direct_running_mode"] == "in_memory"
    flink = beam.pipeline_options("runner=FlinkRunner --flink_master=h:8081", 4).get_all_options()
    assert (flink["runner"], flink["flink_master"]) == ("FlinkRunner", "h:8081")


PEAK_RSS = """
import sys
from keras_transformer.cli import main
status = main(sys.argv[1:])
peak = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")]
print("peak_kib", peak[0].split()[1])
sys.exit(status)
"""


def _beam_peak_mib(tmp_path, copies: int, multi30k_dir, tokenizer) -> float:
    """Peak RSS (the kernel's high-water mark ``VmHWM``) of a fresh ``prepare --runner beam
    --workers 1`` process (the local runner in the job's own process) on ``copies`` copies of
    Multi30k train."""
    import os
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    corpus = []
    for lang in ("en", "de"):
        text = (multi30k_dir / f"train.{lang}").read_text(encoding="utf-8")
        corpus.append(tmp_path / f"x{copies}.{lang}")
        corpus[-1].write_text(text * copies, encoding="utf-8")
    args = ["prepare", "--source", corpus[0], "--target", corpus[1], "--tokenizer", tokenizer]
    args += ["--num-shards", 2, "--runner", "beam", "--workers", 1]
    args += ["--output", tmp_path / f"out{copies}"]
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    command = [sys.executable, "-c", PEAK_RSS, *map(str, args)]
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=tmp_path, env=environment, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return int(result.stdout.split("peak_kib")[-1]) / 1024


def test_the_beam_jobs_memory_does_not_grow_with_the_corpus(
    tmp_path, multi30k_dir, multi30k_tokenizer
):
    """Multi30k train and 8 copies of it: the job's peak RSS grows by less than 40 MiB. Records
    that passed through a grouping step (a sharded ``WriteToTFRecord``) were all held in the
    local runner's memory: +~140 MiB here."""
    tokenizer = multi30k_tokenizer.save(tmp_path / "tokenizer")
    peaks = {copies: _beam_peak_mib(tmp_path, copies, multi30k_dir, tokenizer) for copies in (1, 8)}
    assert _manifest(tmp_path / "out8")["splits"]["train"]["pairs"] == 8 * 29000
    assert peaks[8] - peaks[1] < 40, peaks
