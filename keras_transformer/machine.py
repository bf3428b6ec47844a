"""The machine a result was measured on: its CPU, named beside every time the project records
(Table 3's rows, the benchmarks' JSON, the experiment scripts)."""

import os
import pathlib
import platform


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
