"""A run survives ``kill -9`` anywhere: killed three times (at random batches between backups,
so that the batches since the last backup are replayed, and once in the middle of a backup
write), stopped by SIGTERM (a backup, exit 143) and restarted over a torn newest backup, each
time with the same command, it ends with the weights, history and checkpoints of the run nobody
killed; the same with TensorFlow's default thread pools. Also the time budget across resumes.
Every attempt is ``keras-transformer train`` in a fresh process."""

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

from keras_transformer.training.backup import KILL_VARIABLE
from tests.conftest import fresh_process_environment, small_multi30k

# Columns that depend on the clock; every other column of history.csv must match exactly.
CLOCK_COLUMNS = {"tokens_per_second", "train_minutes"}
# The tiny config's backups: every 7 batches and at each epoch end (20 batches).
BACKUP_EVERY, STEPS_PER_EPOCH, STEPS = 7, 20, 60


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
                "max_steps": STEPS,
                "steps_per_epoch": STEPS_PER_EPOCH,
                "warmup_steps": 20,
                "backup_every_steps": BACKUP_EVERY,
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


def _backed_up_after(batch):
    return batch % BACKUP_EVERY == 0 or batch % STEPS_PER_EPOCH == 0


def _a_batch_between_backups(rng, low, high):
    """A random batch in ``[low, high]`` that is not backed up: 1 to 6 batches after a backup."""
    return rng.choice([b for b in range(low, high + 1) if not _backed_up_after(b)])


def _last_backup_before(batch):
    return max(b for b in range(batch) if b == 0 or _backed_up_after(b))


def _train_process(config, run, default_threads=False, stdout=False, **env):
    """``train`` in a fresh process; ``default_threads``: without the suite's one intra-op thread
    (tests/conftest.py), on TensorFlow's default pools (a thread per core), as users run;
    ``stdout``: keep the output (for ``_finish``, which reads it to the end)."""
    environment = fresh_process_environment(env)
    if default_threads:
        environment.pop("TF_NUM_INTRAOP_THREADS", None)
    command = [sys.executable, "-m", "keras_transformer.cli", "train", "--config", str(config)]
    return subprocess.Popen(
        [*command, "--run", str(run)],
        env=environment,
        stdout=subprocess.PIPE if stdout else subprocess.DEVNULL,
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


def _killed_after(config, run, batch, backed_up=None, **options):
    """Runs the command until it SIGKILLs itself right after ``batch`` (fault injection:
    ``KT_KILL_AFTER_BATCH``), and checks that the newest backup is the one before that batch
    (``backed_up``; by default the tiny config's): the resumed run must replay the batches
    since it. Returns that backup's batch."""
    process = _train_process(config, run, **options, **{KILL_VARIABLE: str(batch)})
    _, err = process.communicate(timeout=400)
    assert process.returncode == -signal.SIGKILL, err[-3000:]
    newest = max(_backups(run)[0], default=0)
    assert newest == (_last_backup_before(batch) if backed_up is None else backed_up)
    return newest


def _finish(process, timeout=400):
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-3000:]
    return out


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
    finished, expected = (json.loads((r / "finished.json").read_text()) for r in (run, reference))
    assert finished["steps"] == expected["steps"] == STEPS
    assert finished.keys() == expected.keys() == {"steps", "trained"}  # and where it finished
    assert not (run / "backup").exists()


@pytest.fixture(scope="module")
def uninterrupted(tiny_config, tmp_path_factory):
    run = tmp_path_factory.mktemp("reference") / "run"
    _finish(_train_process(tiny_config(), run))
    return run


def _sigterm_after_a_new_backup(process, run, rng):
    """SIGTERM once a backup newer than the ones there now is written, and a random fraction of
    a second later (a few batches on); returns stderr."""
    before = max(_backups(run)[0], default=0)
    while max(_backups(run)[0], default=0) <= before:
        assert process.poll() is None, process.stderr.read()[-2000:]
        time.sleep(0.01)
    time.sleep(rng.random() * 0.3)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=200)
    assert process.returncode == 143, err[-2000:]
    return err


def test_killed_three_times_ends_as_the_run_nobody_killed(tiny_config, uninterrupted, tmp_path):
    """Two SIGKILLs at random batches between backups, one inside a backup write, a SIGTERM,
    then a corrupt newest backup: the run still ends with the uninterrupted run's weights,
    history and checkpoints."""
    rng = random.Random(int(os.environ.get("KT_KILL_SEED", "0")))
    run, config = tmp_path / "run", tiny_config()
    first = _a_batch_between_backups(rng, 8, 19)  # inside epoch 0, after the backup of batch 7
    _killed_after(config, run, first)
    done = max(_backups(run)[0])
    # The second kill lands inside a backup write (each write pauses, half-written, for 3 s).
    process = _train_process(config, run, KT_BACKUP_WRITE_PAUSE_S="3")
    _kill_when(process, lambda: any(t > done for t in _backups(run)[1]))
    assert _backups(run)[1], "the kill did not land in a write"
    third = _a_batch_between_backups(rng, max(_backups(run)[0]) + 1, 45)
    _killed_after(config, run, third)
    # SIGTERM: a backup at that batch, exit status 143, one line saying how to resume.
    err = _sigterm_after_a_new_backup(_train_process(config, run), run, rng)
    assert "stopped by SIGTERM after batch" in err and "run the same command" in err
    assert not (run / "finished.json").exists()
    # A torn newest backup (a filesystem without atomic rename): the one before it is used.
    newest = run / "backup" / f"batch-{max(_backups(run)[0])}" / "variables.npz"
    newest.write_bytes(newest.read_bytes()[:100])
    _finish(_train_process(config, run))
    print(f"killed after batches {first} and {third}, and in the write after {done}")
    _assert_same_run(run, uninterrupted)


def test_a_kill_on_tensorflow_default_thread_pools_resumes_exactly(tiny_config, tmp_path):
    """The suite's fresh processes run on one intra-op thread; users run TensorFlow's default
    pools (a thread per core). There too, op determinism on, a run killed between backups and
    resumed ends bit for bit as the run nobody killed (tolerance 0)."""
    rng = random.Random(int(os.environ.get("KT_KILL_SEED", "0")) + 1)
    config = tiny_config()
    reference = tmp_path / "reference"
    _finish(_train_process(config, reference, default_threads=True))
    run = tmp_path / "run"
    backup = _killed_after(config, run, _a_batch_between_backups(rng, 22, 45), default_threads=True)
    started = time.monotonic()
    out = _finish(_train_process(config, run, default_threads=True, stdout=True))
    _assert_same_run(run, reference)
    # what the restart printed: the update it resumed at, and seconds within the process's life
    first = re.search(r"First step \(update (\d+)\) ([0-9.]+) s after the start", out)
    assert first and int(first.group(1)) == backup + 1, out[-2000:]
    assert 0 < float(first.group(2)) < time.monotonic() - started


def _state(run, batches):
    return json.loads(
        (pathlib.Path(run) / "backup" / f"batch-{batches}" / "state.json").read_text()
    )


def test_time_budget_stops_the_run_and_counts_earlier_attempts(tiny_config, tmp_path):
    """A 1-minute budget, the run killed after batch 3 (its backup of batch 2 holds the seconds
    spent): the resumed attempt's clock goes on from the backup's, and the run stops once both
    attempts together have spent the budget. Where the budget stops, to the batch, is tested
    with a scripted clock below."""
    run = tmp_path / "run"
    # A backup every 2 batches: the resumed attempt backs up long before the budget is spent,
    # however slow a loaded machine makes the first attempt's start.
    config = tiny_config("budget.yaml", max_steps=100_000, max_minutes=1.0, backup_every_steps=2)
    killed_at = _killed_after(config, run, 3, backed_up=2)
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
    assert spent >= 60  # the budget, counted over both attempts, was used up before stopping
    steps = json.loads((run / "finished.json").read_text())["steps"]
    assert killed_at < steps < 100_000


def test_the_time_budget_stops_at_the_first_batch_that_reaches_it(tmp_path):
    """Where the budget stops a run, without a clock: a scripted run clock says 10 s more after
    each batch, and the budget (0.5 minutes) ends the run after batch 3 of 50, recording 30 s."""
    import keras

    from keras_transformer.training.callbacks import TimeBudget

    class Batches(keras.callbacks.Callback):
        count = 0

        def on_train_batch_end(self, batch, logs=None):
            self.count += 1

    batches = Batches()

    class ScriptedClock:  # the run's clock (RunClock), as it reads after each batch
        def start(self):
            pass

        def spent(self):
            return 10.0 * batches.count

    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    budget = TimeBudget(0.5, tmp_path / "time_spent.json", clock=ScriptedClock())
    model.fit(np.ones((50, 1)), np.ones((50, 1)), batch_size=1, callbacks=[batches, budget])
    assert batches.count == 3
    assert json.loads((tmp_path / "time_spent.json").read_text()) == {"seconds": 30.0, "epoch": 1}
