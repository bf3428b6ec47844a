"""Training across machines as a user runs it: two ``keras-transformer train`` processes with
``TF_CONFIG`` on 127.0.0.1, from prepared Multi30k shards (paper section 5.2)."""

import csv
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from tests._cluster import free_ports, wait_all
from tests.conftest import REPO_ROOT

TIMEOUT_S = 420


def _config(path, shards, **training):
    path.write_text(
        yaml.safe_dump(
            {
                "model": {
                    "preset": "tiny",
                    "dropout": 0.0,
                },  # no dropout: the replicas draw no masks
                "data": {
                    "shards": str(shards),
                    "tokens_per_batch": 1024,
                    "max_sentence_length": 64,
                },
                "training": {
                    "max_steps": 6,
                    "steps_per_epoch": 2,
                    "warmup_steps": 4,
                    "keep_checkpoints": 1,
                    "xla_loss": False,
                    **training,
                },
            }
        )
    )
    return path


def _losses(run):
    with open(run / "history.csv") as handle:
        return [float(row["loss"]) for row in csv.DictReader(handle)]


def _start_workers(config, run, cwd, ports, attempt=""):
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), environment.get("PYTHONPATH")])
    )
    command = [sys.executable, "-m", "keras_transformer.cli", "train", "--config", str(config)]
    processes = []
    for index in range(len(ports)):
        tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
        log = open(cwd / f"worker_{index}{attempt}.log", "w")
        process = subprocess.Popen(
            [*command, "--run", str(run)],
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**environment, "TF_CONFIG": json.dumps(tf_config)},
        )
        processes.append((process, log))
    return processes


def _train_on_workers(config, run, cwd, count=2, attempt=""):
    processes = _start_workers(config, run, cwd, free_ports(count), attempt)
    codes = wait_all(processes, TIMEOUT_S)
    for index, code in enumerate(codes):
        log = (cwd / f"worker_{index}{attempt}.log").read_text()
        assert code == 0, f"worker {index} ended with {code}:\n{log[-4000:]}"


@pytest.fixture(scope="module")
def two_workers(prepared, tmp_path_factory):
    """An uninterrupted two-worker run of a 12-step config with a backup every 3 batches."""
    folder = tmp_path_factory.mktemp("two_workers")
    config = _config(
        folder / "config.yaml",
        prepared / "shards",
        max_steps=12,
        steps_per_epoch=4,
        backup_every_steps=3,
    )
    _train_on_workers(config, folder / "two", folder)
    return config, folder / "two"


def test_two_workers_train_like_one_process_on_the_same_global_batches(
    two_workers, tmp_path, run_cli
):
    config, chief = two_workers
    single = run_cli("train", "--config", config, "--run", tmp_path / "one", cwd=tmp_path)
    assert single.returncode == 0, single.stderr
    other = chief / "workers" / "worker_1"
    assert (chief / "model.keras").is_file() and (chief / "tokenizer").is_dir()
    assert (other / "model.keras").is_file()  # the other worker writes apart, as Keras does
    assert not (chief / "workers" / "worker_0").exists()
    one, two = _losses(tmp_path / "one"), _losses(chief)
    assert len(one) == len(two) == 3
    # The same global batches split over two replicas: equal up to float32 summation order.
    np.testing.assert_allclose(two, one, rtol=2e-3)
    np.testing.assert_allclose(_losses(other), two, rtol=1e-6)


def _newest_backup(run):
    folder = run / "backup"
    names = [p.name for p in folder.iterdir()] if folder.is_dir() else []
    return max([int(n.split("-")[1]) for n in names if n.startswith("batch-")], default=0)


def test_a_killed_worker_restarted_with_the_others_resumes_the_job(two_workers, tmp_path):
    config, uninterrupted = two_workers
    run, ports = tmp_path / "two", free_ports(2)
    processes = _start_workers(config, run, tmp_path, ports, attempt="_a")
    other = run / "workers" / "worker_1"
    deadline = time.monotonic() + TIMEOUT_S
    while _newest_backup(other) < 6:  # worker 1 dies in epoch 1, after its batch-6 backup
        assert all(p.poll() is None for p, _ in processes), (
            tmp_path / "worker_1_a.log"
        ).read_text()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    processes[1][0].kill()
    # The chief then fails in its next collective (or hangs): a cluster manager restarts both.
    try:
        processes[0][0].wait(timeout=30)
    except subprocess.TimeoutExpired:
        processes[0][0].kill()
    wait_all(processes, 10)
    assert not (run / "finished.json").exists()
    _train_on_workers(config, run, tmp_path, attempt="_b")
    for index in range(2):  # both resumed from the backup they share (batch 6), not from scratch
        assert "after batch 6 (epoch 2)" in (tmp_path / f"worker_{index}_b.log").read_text()
    assert _losses(run) == pytest.approx(_losses(uninterrupted), rel=1e-6)
    assert _losses(other) == pytest.approx(_losses(uninterrupted), rel=1e-6)
    assert json.loads((run / "finished.json").read_text())["steps"] == 12


@pytest.mark.slow  # reads the default config's corpus (multi30k) before it refuses
def test_several_workers_refuse_a_tokenizer_per_worker_and_a_clock_each(
    tmp_path, run_cli, toy_tokenizer
):
    base = {"model": {"preset": "tiny"}, "training": {"max_steps": 2}}
    tf_config = json.dumps(
        {
            "cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
            "task": {"type": "worker", "index": 0},
        }
    )
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(base))
    result = run_cli(
        "train",
        "--config",
        tmp_path / "a.yaml",
        "--run",
        tmp_path / "a",
        cwd=tmp_path,
        env={"TF_CONFIG": tf_config},
        timeout=120,
    )
    if result.returncode != 2:
        pytest.fail(result.stderr[-3000:])
    assert "tokenizer prepared beforehand" in result.stderr and "Traceback" not in result.stderr
    # With the tokenizer given, a time budget: each worker would stop on its own clock.
    toy_tokenizer.save(tmp_path / "tokenizer")
    timed = {**base, "data": {"tokenizer": str(tmp_path / "tokenizer")}}
    timed["training"] = {**base["training"], "max_minutes": 5}
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(timed))
    args = ["--config", tmp_path / "b.yaml", "--run", tmp_path / "b"]
    result = run_cli("train", *args, cwd=tmp_path, env={"TF_CONFIG": tf_config}, timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "training.max_minutes=5" in result.stderr and "own clock" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "b").exists()
