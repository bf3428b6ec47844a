"""Training across machines as a user runs it: two ``keras-transformer train`` processes with
``TF_CONFIG`` on 127.0.0.1, from prepared Multi30k shards (paper section 5.2)."""

import csv
import json
import os
import subprocess
import sys

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
                    **training,
                },
            }
        )
    )
    return path


def _losses(run):
    with open(run / "history.csv") as handle:
        return [float(row["loss"]) for row in csv.DictReader(handle)]


def _train_on_workers(config, run, cwd, count=2):
    ports = free_ports(count)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), environment.get("PYTHONPATH")])
    )
    processes = []
    for index in range(count):
        tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
        log = open(cwd / f"worker_{index}.log", "w")
        command = [
            sys.executable,
            "-m",
            "keras_transformer.cli",
            "train",
            "--config",
            str(config),
            "--run",
            str(run),
        ]
        processes.append(
            (
                subprocess.Popen(
                    command,
                    cwd=cwd,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**environment, "TF_CONFIG": json.dumps(tf_config)},
                ),
                log,
            )
        )
    codes = wait_all(processes, TIMEOUT_S)
    for index, code in enumerate(codes):
        log = (cwd / f"worker_{index}.log").read_text()
        assert code == 0, f"worker {index} ended with {code}:\n{log[-4000:]}"


def test_two_workers_train_like_one_process_on_the_same_global_batches(prepared, tmp_path, run_cli):
    config = _config(tmp_path / "config.yaml", prepared / "shards")
    single = run_cli("train", "--config", config, "--run", tmp_path / "one", cwd=tmp_path)
    assert single.returncode == 0, single.stderr
    _train_on_workers(config, tmp_path / "two", tmp_path)
    chief, other = tmp_path / "two", tmp_path / "two" / "workers" / "worker_1"
    assert (chief / "model.keras").is_file() and (chief / "tokenizer").is_dir()
    assert (other / "model.keras").is_file()  # the other worker writes apart, as Keras does
    assert not (chief / "workers" / "worker_0").exists()
    one, two = _losses(tmp_path / "one"), _losses(chief)
    assert len(one) == len(two) == 3
    # The same global batches split over two replicas: equal up to float32 summation order.
    np.testing.assert_allclose(two, one, rtol=2e-3)
    np.testing.assert_allclose(_losses(other), two, rtol=1e-6)


def test_several_workers_refuse_a_tokenizer_per_worker_and_a_clock_each(tmp_path, run_cli):
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
