"""How an ablation runs its rows: each row's ``keras-transformer train`` in a fresh process (a
crash ends that row only, and its memory is freed), the state file written atomically, one
ablation per output folder at a time, and a row whose process outlived a killed ablation waited
for before the row is trained again."""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

from keras_transformer.text.files import atomic_write_text

__all__ = [
    "TrainResult",
    "hold_output",
    "last_error_line",
    "read_state",
    "train_row",
    "write_state",
]

STATE_FILE = "ablation.json"
LOCK_FILE = ".ablation.lock"
LOG_DIR = "logs"
# Runs ``python -m keras_transformer.cli ARGS`` once the process asked the kernel to send it
# SIGTERM when the ablation dies (Linux; elsewhere a killed ablation leaves the row running):
# train then writes a backup and stops, and the rerun resumes from it.
_LAUNCHER = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(128 + signal.SIGTERM)\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'keras_transformer.cli', *sys.argv[2:]])\n"
)
_ERROR_LINE = re.compile(r"^(\w+\.)*\w*(Error|Exception|Exit)\b|error:")
INTERRUPTED = {128 + signal.SIGTERM, -signal.SIGTERM, 128 + signal.SIGINT, -signal.SIGINT}


class TrainResult:
    """How a row's train process ended: ``status`` 0, an error's last line, or interrupted."""

    def __init__(self, returncode: int, error: str | None):
        self.returncode = returncode
        self.error = error
        self.interrupted = returncode in INTERRUPTED


def read_state(output: pathlib.Path) -> dict | None:
    """The state file of an output folder, or None when there is none yet."""
    path = pathlib.Path(output) / STATE_FILE
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{path}: not a state file of keras-transformer ablate ({error})"
        ) from error


def write_state(output: pathlib.Path, state: dict, name: str = STATE_FILE) -> None:
    """Writes the state file (or another JSON ``name``) under a temporary name, flushed to
    disk, then renames it."""
    atomic_write_text(pathlib.Path(output) / name, json.dumps(state, indent=1) + "\n", fsync=True)


def hold_output(output: pathlib.Path):
    """An exclusive lock on ``output`` for this process (released when it exits, however it
    exits); a second ablation on the same folder is refused with a ``ValueError``."""
    import fcntl

    output.mkdir(parents=True, exist_ok=True)
    handle = open(output / LOCK_FILE, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        handle.close()
        raise ValueError(f"{output}: another keras-transformer ablate is running on it") from error
    return handle


def _alive(pid: int, run_dir: pathlib.Path) -> bool:
    """Whether ``pid`` is still a process that trains ``run_dir`` (not a reused pid)."""
    try:
        cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return str(run_dir).encode() in cmdline and b"train" in cmdline


def wait_for_stale(pid: int | None, run_dir: pathlib.Path, patience: float = 120.0) -> None:
    """Waits for the train process a killed ablation left behind (it got SIGTERM and is writing
    its backup); after ``patience`` seconds it is sent SIGTERM, then SIGKILL."""
    if not pid:
        return
    deadline = time.monotonic() + patience
    for stop in (None, signal.SIGTERM, signal.SIGKILL):
        if stop is not None and _alive(pid, run_dir):
            os.kill(pid, stop)
        while _alive(pid, run_dir) and time.monotonic() < deadline:
            time.sleep(0.5)
        if not _alive(pid, run_dir):
            return
        deadline = time.monotonic() + 30.0


def last_error_line(text: str) -> str | None:
    """The line that names the error in a process's stderr: the last exception or
    ``error:`` line, else the last non-empty line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    named = [line for line in lines if _ERROR_LINE.search(line)]
    return (named or lines or [None])[-1]


def train_row(
    command: list[str], run_dir: pathlib.Path, logs: pathlib.Path, on_start
) -> TrainResult:
    """Runs ``keras-transformer train COMMAND`` in a fresh process with its output appended to
    ``logs/<row>.out`` and ``.err``; ``on_start(pid)`` records the process before it is waited
    for. Returns how it ended, with the last error line of this attempt's stderr."""
    logs.mkdir(parents=True, exist_ok=True)
    out_path, err_path = logs / f"{run_dir.name}.out", logs / f"{run_dir.name}.err"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    with open(out_path, "a") as out, open(err_path, "a") as err:
        for handle in (out, err):
            handle.write(f"=== {stamp}: keras-transformer {' '.join(command)}\n")
            handle.flush()
        start = os.path.getsize(err_path)
        process = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, str(os.getpid()), *command],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
        )
        on_start(process.pid)
        returncode = process.wait()
    if returncode == 0:
        return TrainResult(0, None)
    with open(err_path, "rb") as handle:
        handle.seek(start)
        text = handle.read().decode("utf-8", errors="replace")
    why = last_error_line(text) or f"exit status {returncode}"
    if returncode < 0 and returncode not in INTERRUPTED:  # e.g. SIGKILL from the OOM killer
        why = f"killed by {signal.Signals(-returncode).name}; last line: {why}"
    return TrainResult(returncode, why)
