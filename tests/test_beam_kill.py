"""A prepare job SIGKILLed mid-shard (a fresh ``keras-transformer prepare`` process, killed with its
worker processes) leaves no shard that reads as complete, and the rerun completes with the shards
of an uninterrupted run: both runners, on Multi30k train."""

import collections
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO_ROOT


def _examples(folder):
    from keras_transformer import data

    found = collections.Counter()
    for source, target in data.read_tfrecord_shards(folder, "train").as_numpy_iterator():
        found[(tuple(source.tolist()), tuple(target.tolist()))] += 1
    return found


def _summary(folder):
    train = json.loads((folder / "manifest.json").read_text())["splits"]["train"]
    keys = ("pairs", "kept", "dropped", "source_tokens", "target_tokens", "shards")
    return {key: train[key] for key in keys}


@pytest.fixture(scope="module")
def job(tmp_path_factory, multi30k_dir, multi30k_tokenizer):
    """(the job's arguments, an uninterrupted pool run's output folder)."""
    from pipelines import prepare

    folder = tmp_path_factory.mktemp("kill")
    tokenizer = multi30k_tokenizer.save(folder / "tokenizer")
    args = ["--source", str(multi30k_dir / "train.en"), "--target", str(multi30k_dir / "train.de")]
    args += ["--tokenizer", tokenizer, "--num-shards", "2", "--workers", "2"]
    reference = folder / "reference"
    assert prepare.main([*args, "--output", str(reference)]) == 0
    return args, reference


def _kill_mid_shard(args, output, mid_shard, timeout=240):
    """Start the job in a fresh process group; SIGKILL the group once ``mid_shard(output)``."""
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_transformer.cli", "prepare", *args, "--output", output],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout
    while not (output.is_dir() and mid_shard(output)):
        assert process.poll() is None, "the job ended before it was killed"
        assert time.monotonic() < deadline, "the job never started writing a shard"
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL


def _assert_nothing_reads_as_complete(output):
    from keras_transformer import data
    from keras_transformer.training.shards import ShardsError, read_prepared

    with pytest.raises(ShardsError):
        read_prepared(output)
    with pytest.raises(data.MissingDataError):
        data.read_tfrecord_shards(output, "train")


def _pool_writing(output):
    return any(p.stat().st_size > 0 for p in output.glob("train-*.tfrecord.tmp-*"))


def _beam_writing(output):
    """A shard writer has records in its file in the split's temporary folder."""
    return any(p.stat().st_size > 0 for p in output.glob("train.tmp-*/train-*.tfrecord"))


def test_a_killed_pool_job_reruns_to_the_same_shards(job, tmp_path, run_cli):
    args, reference = job
    args = [*args, "--executor", "process"]
    output = tmp_path / "out"
    _kill_mid_shard(args, output, _pool_writing)
    assert list(output.glob("*.tmp-*"))  # killed mid-shard: its temporaries are there
    _assert_nothing_reads_as_complete(output)
    result = run_cli("prepare", *args, "--output", output, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert not list(output.glob("*.tmp-*"))
    assert _summary(output) == _summary(reference)
    for name in _summary(reference)["shards"]:
        assert (output / name).read_bytes() == (reference / name).read_bytes(), name


def test_a_killed_beam_job_reruns_to_the_same_examples(job, tmp_path, run_cli):
    args, reference = job
    args = [*args, "--runner", "beam"]
    output = tmp_path / "out"
    _kill_mid_shard([*args, "--workers", "1"], output, _beam_writing)
    _assert_nothing_reads_as_complete(output)
    result = run_cli("prepare", *args, "--output", output, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert not list(output.glob("*.tmp-*"))
    assert _summary(output) == _summary(reference)
    assert _examples(output) == _examples(reference)
