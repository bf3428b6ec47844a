"""The tf.data service as a user runs it: a dispatcher and two workers started with
``keras-transformer data-service`` on 127.0.0.1 feed ``keras-transformer train --shards DIR
data.service=grpc://127.0.0.1:PORT``, each in a fresh process."""

import os
import socket
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO_ROOT


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _start(*args, log):
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="0")
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_transformer.cli", "data-service", *map(str, args)],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    line = process.stdout.readline()  # "... listening on ADDRESS" once the server runs
    assert "listening on" in line, (args, line, process.poll())
    return process, line.split()[-1]


@pytest.fixture()
def service(tmp_path):
    """(dispatcher address, worker log files) of one dispatcher and two workers."""
    processes, logs = [], []
    try:
        port = _free_port()
        log = open(tmp_path / "dispatcher.log", "w")  # noqa: SIM115
        dispatcher, target = _start("dispatcher", "--port", port, log=log)
        processes.append(dispatcher)
        assert target == f"grpc://localhost:{port}"
        address = f"grpc://127.0.0.1:{port}"
        for index in range(2):
            worker_port = _free_port()
            logs.append(tmp_path / f"worker{index}.log")
            worker, _ = _start(
                "worker",
                "--dispatcher",
                address,
                "--port",
                worker_port,
                "--worker-address",
                f"127.0.0.1:{worker_port}",
                log=open(logs[-1], "w"),  # noqa: SIM115
            )
            processes.append(worker)
        yield address, logs
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


def test_two_workers_feed_training_from_shards(prepared, service, tmp_path, run_cli):
    address, worker_logs = service
    config = {
        "model": {"preset": "tiny"},
        "data": {"tokens_per_batch": 512, "max_sentence_length": 64},
        "training": {"max_steps": 4, "steps_per_epoch": 4, "warmup_steps": 2, "xla_loss": False},
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(config))
    run = tmp_path / "run"
    result = run_cli(
        "train",
        "--config",
        path,
        "--shards",
        prepared / "shards",
        "--run",
        run,
        f"data.service={address}",
        "data.service_job=test",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert (run / "model.keras").is_file()
    assert len((run / "history.csv").read_text().splitlines()) == 2
    # Both workers made batches: each opened the shards (TensorFlow logs it at INFO level).
    for log in worker_logs:
        assert "TFRecordDataset" in log.read_text(), log.read_text()[-2000:]


def test_a_bad_address_is_one_line_naming_it(tmp_path, run_cli):
    result = run_cli("data-service", "worker", "--dispatcher", "nowhere", cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "--dispatcher" in result.stderr and "'nowhere'" in result.stderr, result.stderr


def test_distribute_reads_every_element_once_per_epoch():
    import tensorflow as tf

    from keras_transformer.data import service

    dispatcher = service.start_dispatcher()
    workers = [service.start_worker(dispatcher.target) for _ in range(2)]
    dataset = tf.data.Dataset.range(40)
    served = service.distribute(dataset, dispatcher.target, job_name="once")
    assert sorted(int(x) for x in served) == list(range(40))
    assert service.PROCESSING_MODE == "distributed_epoch" and len(workers) == 2
    with pytest.raises(ValueError, match="grpc://HOST:PORT"):
        service.distribute(dataset, "localhost")
