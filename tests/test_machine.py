"""The machine named beside recorded times: checked against ``lscpu``, an independent reader."""

import os
import shutil
import subprocess

import pytest


@pytest.mark.skipif(shutil.which("lscpu") is None, reason="lscpu is not installed")
def test_cpu_description_agrees_with_lscpu():
    from keras_transformer.machine import cpu_description, machine_record

    fields = {}
    for line in subprocess.run(
        ["lscpu"], capture_output=True, text=True, check=True
    ).stdout.splitlines():
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    flags = fields.get("Flags", "").split()
    described = cpu_description()
    assert described["model"] == fields["Model name"]
    assert described["avx512_bf16"] == ("avx512_bf16" in flags)
    assert described["amx_bf16"] == ("amx_bf16" in flags)
    assert machine_record()["cpu"] == f"{fields['Model name']} x {os.cpu_count()}"
