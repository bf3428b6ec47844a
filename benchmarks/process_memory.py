"""Peak resident memory of every process of a command (the command and all its descendants).

Linux only: polls ``/proc`` every ``interval`` seconds while the command runs and keeps, per
process, the kernel's high-water mark ``VmHWM`` (the largest RSS the process ever had, so a peak
between two polls is not missed while the process lives; a process that starts and ends between
two polls is). Used by the scale benchmarks, whose jobs start pools and Beam workers.

Example::

    result, peaks = run_measured(["keras-transformer", "prepare", ...])
    peaks   # [{"pid": 123, "role": "keras_transformer.cli prepare", "peak_rss_mib": 812.4}, ...]
"""

from __future__ import annotations

import pathlib
import subprocess
import threading
import time

__all__ = ["run_measured"]


def _children() -> dict:
    """``{parent pid: [child pids]}`` of every process now."""
    tree: dict = {}
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return tree


def _descendants(root: int) -> list:
    tree, found, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += tree.get(pid, [])
    return found


def _peak_kib(pid: int) -> int | None:
    try:
        for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _role(pid: int) -> str:
    """A short name: the command line's first words after the interpreter."""
    try:
        words = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    words = [w.decode(errors="replace") for w in words if w]
    if words and "python" in pathlib.Path(words[0]).name:
        words = words[1:]
        if words[:1] == ["-m"] or words[:1] == ["-c"]:
            words = words[1:]
    return " ".join(words[:2])[:80]


def run_measured(args, interval: float = 0.2, **popen) -> tuple:
    """Run ``args`` to its end; return ``(CompletedProcess, per-process peaks)``."""
    peaks: dict = {}
    process = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen
    )
    done = threading.Event()

    def poll():
        while not done.is_set():
            for pid in _descendants(process.pid):
                kib = _peak_kib(pid)
                if kib is None:
                    continue
                entry = peaks.setdefault(pid, {"pid": pid, "role": _role(pid), "kib": 0})
                entry["kib"] = max(entry["kib"], kib)
            time.sleep(interval)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    stdout, stderr = process.communicate()
    done.set()
    thread.join()
    rows = [
        {"pid": p["pid"], "role": p["role"], "peak_rss_mib": round(p["kib"] / 1024, 1)}
        for p in sorted(peaks.values(), key=lambda p: p["pid"])
    ]
    completed = subprocess.CompletedProcess(args, process.returncode, stdout, stderr)
    return completed, rows
