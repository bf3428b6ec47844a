"""The machine a result was measured on: its CPU, named beside every time the project records
(a finished run, Table 3's rows, the benchmarks' JSON, the experiment scripts)."""

import os
import pathlib
import platform
import subprocess
import time


def cpu_description() -> dict:
    """``{"model", "cpus", "machine", "avx512_bf16", "amx_bf16"}``: the CPU's model name and
    bfloat16 flags from ``/proc/cpuinfo`` (Linux; elsewhere the platform's processor and no
    flags), and the CPUs this process sees."""
    info = {
        "model": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }
    try:
        lines = pathlib.Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return info
    model = next((line for line in lines if line.startswith("model name")), None)
    if model:
        info["model"] = model.split(":", 1)[1].strip()
    flags = next((line for line in lines if line.startswith("flags")), "").split()
    info["avx512_bf16"] = "avx512_bf16" in flags
    info["amx_bf16"] = "amx_bf16" in flags
    return info


def cpu_model() -> str:
    """The CPU's model name (``cpu_description()["model"]``)."""
    return cpu_description()["model"]


def package_commit() -> str | None:
    """The short commit of the checkout this package runs from (``+`` when its files have
    changes), or None outside a git checkout: an installed package inside someone else's
    repository (a venv in a project folder) names no commit of that repository."""
    root = pathlib.Path(__file__).resolve().parents[1]

    def git(*args) -> str:
        run = subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=True
        )
        return run.stdout.strip()

    try:
        top, commit = git("rev-parse", "--show-toplevel", "--short", "HEAD").splitlines()
        if pathlib.Path(top).resolve() != root:
            return None
        changed = git("status", "--porcelain", "--untracked-files=no", "--", "keras_transformer")
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+" if changed else "")


def machine_record() -> dict:
    """Where and when something finished: ``{"date": UTC day, "cpu": "<model> x N", "commit"}``,
    so results made in several sessions say which machine and code made each."""
    cpu = cpu_description()
    return {
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "cpu": f"{cpu['model']} x {cpu['cpus']}",
        "commit": package_commit(),
    }
