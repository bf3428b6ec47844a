"""A run survives ``kill -9`` anywhere: killed three times (once in the middle of a backup write),
stopped by SIGTERM (a backup, exit 143) and restarted over a torn newest backup, each time with
the same command, it ends with the weights, history and checkpoints of the run nobody killed.
Also the time budget across resumes. Every attempt is ``keras-transformer train`` in a fresh
process."""

import csv
import json
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml

from tests.conftest import REPO_ROOT, small_multi30k

# Columns that depend on the clock; every other column of history.csv must match exactly.
CLOCK_COLUMNS = {"tokens_per_second", "train_minutes"}


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory, multi30k_dir, multi30k_tokenizer):
    """A config writer: tiny model with dropout (so the seed state matters), 60 steps, a backup
    every 7 batches, op determinism on."""
    folder = tmp_path_factory.mktemp("resume")
    paths = small_multi30k(multi30k_dir, folder, multi30k_tokenizer, 3000, 100)

    def write(name="tiny.yaml", **training):
        config = {
            "model": {"preset": "tiny", "d_model": 32, "d_ff": 64, "dropout": 0.1},
            "data": {
                **paths,
                "tokens_per_batch": 512,
                "max_sentence_length": 32,
            },
            "training": {
                "max_steps": 60,
                "steps_per_epoch": 20,
                "warmup_steps": 20,
                "backup_every_steps": 7,
                "keep_checkpoints": 3,
                "deterministic": True,
                "xla_loss": False,
                **training,
            },
        }
        path = folder / name
        path.write_text(yaml.safe_dump(config))
        return path

    return write


def _train_process(config, run, **env):
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    environment["PYTHONPATH"] = str(REPO_ROOT)
    environment.update(env)
    command = [sys.executable, "-m", "keras_transformer.cli", "train", "--config", str(config)]
    return subprocess.Popen(
        [*command, "--run", str(run)],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _backups(run):
    folder = pathlib.Path(run) / "backup"
    if not folder.is_dir():
        return [], []
    names = [p.name for p in folder.iterdir()]
    done = [int(n.split("-")[1]) for n in names if n.startswith("batch-")]
    # A backup being written: .batch-<n>.tmp-<pid>-<hex> (keras_transformer/text/files.py).
    writing = [int(m.group(1)) for n in names if (m := re.fullmatch(r"\.batch-(\d+)\.tmp-.*", n))]
    return sorted(done), writing


def _kill_when(process, condition, timeout=400):
    """SIGKILLs ``process`` as soon as ``condition()`` holds; fails if it ended first."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, f"ended before the kill: {process.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "the kill point was never reached"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait()


def _finish(process, timeout=400):
    _, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-3000:]


def _history(run):
    with open(pathlib.Path(run) / "history.csv") as handle:
        rows = list(csv.DictReader(handle))
    return [{k: v for k, v in row.items() if k not in CLOCK_COLUMNS} for row in rows]


def _weights(path):
    import keras

    model = keras.models.load_model(path, compile=False)
    return [np.asarray(w) for w in model.weights]


def _h5_arrays(path):
    import h5py

    arrays = []

    def collect(_, item):
        if hasattr(item, "shape"):
            arrays.append(item[()])

    with h5py.File(path) as handle:
        handle.visititems(collect)
    return arrays


def _checkpoint_weights(run):
    paths = sorted((pathlib.Path(run) / "checkpoints").glob("*.weights.h5"))
    return {path.name: _h5_arrays(path) for path in paths}


def _assert_same_run(run, reference):
    assert _history(run) == _history(reference)  # no duplicate rows, no gaps, the same numbers
    for ours, theirs in zip(_weights(run / "model.keras"), _weights(reference / "model.keras")):
        np.testing.assert_array_equal(ours, theirs)  # tolerance 0: same ops in the same order
    ours, theirs = _checkpoint_weights(run), _checkpoint_weights(reference)
    assert sorted(ours) == sorted(theirs)
    for name in ours:
        for a, b in zip(ours[name], theirs[name]):
            np.testing.assert_array_equal(a, b)
    finished = json.loads((run / "finished.json").read_text())
    assert finished == json.loads((reference / "finished.json").read_text()) == {"steps": 60}
    assert not (run / "backup").exists()


@pytest.fixture(scope="module")
def uninterrupted(tiny_config, tmp_path_factory):
    run = tmp_path_factory.mktemp("reference") / "run"
    _finish(_train_process(tiny_config(), run))
    return run


def _sigterm_after_a_new_backup(process, run):
    """SIGTERM once a backup newer than the ones there now is written; returns stderr."""
    before = max(_backups(run)[0], default=0)
    while max(_backups(run)[0], default=0) <= before:
        assert process.poll() is None, process.stderr.read()[-2000:]
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=200)
    assert process.returncode == 143, err[-2000:]
    return err


def test_killed_three_times_ends_as_the_run_nobody_killed(tiny_config, uninterrupted, tmp_path):
    """Three SIGKILLs (one inside a backup write), a SIGTERM, then a corrupt newest backup: the
    run still ends with the uninterrupted run's weights, history and checkpoints."""
    rng = random.Random(int(os.environ.get("KT_KILL_SEED", "0")))
    run, config = tmp_path / "run", tiny_config()
    first = rng.randint(3, 18)  # batches backed up before the first kill, inside epoch 0
    process = _train_process(config, run)
    _kill_when(process, lambda: any(b >= first for b in _backups(run)[0]))
    done = max(_backups(run)[0])
    # The second kill lands inside a backup write (each write pauses, half-written, for 3 s).
    process = _train_process(config, run, KT_BACKUP_WRITE_PAUSE_S="3")
    _kill_when(process, lambda: any(t > done for t in _backups(run)[1]))
    assert _backups(run)[1], "the kill did not land in a write"
    third = rng.randint(max(_backups(run)[0]) + 1, 45)
    process = _train_process(config, run)
    _kill_when(process, lambda: any(b >= third for b in _backups(run)[0]))
    time.sleep(rng.random() * 0.5)  # not always right after a backup
    # SIGTERM: a backup at that batch, exit status 143, one line saying how to resume.
    err = _sigterm_after_a_new_backup(_train_process(config, run), run)
    assert "stopped by SIGTERM after batch" in err and "run the same command" in err
    assert not (run / "finished.json").exists()
    # A torn newest backup (a filesystem without atomic rename): the one before it is used.
    newest = run / "backup" / f"batch-{max(_backups(run)[0])}" / "variables.npz"
    newest.write_bytes(newest.read_bytes()[:100])
    _finish(_train_process(config, run))
    print(f"kills after backups of batch >= {first}, in the write after {done}, >= {third}")
    _assert_same_run(run, uninterrupted)


def _state(run, batches):
    return json.loads(
        (pathlib.Path(run) / "backup" / f"batch-{batches}" / "state.json").read_text()
    )


def _seconds_or_none(run, batches):
    """A backup's seconds, or None when the run removed it (it keeps two) since it was listed."""
    try:
        return _state(run, batches)["seconds"]
    except FileNotFoundError:
        return None


def test_time_budget_stops_the_run_and_counts_earlier_attempts(tiny_config, tmp_path):
    run = tmp_path / "run"
    # A backup every 2 batches: however slow a loaded machine makes them, the resumed attempt
    # backs up before its clock reaches the budget (every 7 let it finish without one).
    config = tiny_config("budget.yaml", max_steps=100_000, max_minutes=0.5, backup_every_steps=2)
    process = _train_process(config, run)
    _kill_when(
        process, lambda: any((_seconds_or_none(run, b) or 0) >= 10 for b in _backups(run)[0])
    )
    killed_at = max(_backups(run)[0])
    before = _state(run, killed_at)["seconds"]
    process = _train_process(config, run)
    # The resumed attempt's clock goes on from the backup's: its first backup counts both.
    while not [b for b in _backups(run)[0] if b > killed_at]:
        assert process.poll() is None, process.stderr.read()[-2000:]
        time.sleep(0.01)
    first_new = min(b for b in _backups(run)[0] if b > killed_at)
    assert _state(run, first_new)["seconds"] > before
    _finish(process)
    spent = json.loads((run / "time_spent.json").read_text())["seconds"]
    assert 30 <= spent < 30 + 60  # stopped at the first batch past the budget (plus validation)
    steps = json.loads((run / "finished.json").read_text())["steps"]
    assert killed_at < steps < 100_000
