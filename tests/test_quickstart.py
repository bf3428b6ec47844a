"""The README's first command as a newcomer runs it: ``scripts/quickstart.sh`` with the installed
``keras-transformer`` console script on the PATH (an activated venv), ``translate`` reading the
test sentences from stdin. Only the size is made tiny, through the overrides the script passes
on to ``train``."""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

# Size only: a model of one layer and 4 steps, a vocabulary of 1,000 pieces, no time budget.
TINY = [
    "model.num_layers=1",
    "model.d_model=32",
    "model.d_ff=64",
    "model.num_heads=2",
    "data.vocab_size=1000",
    "training.max_steps=4",
    "training.steps_per_epoch=2",
    "training.warmup_steps=2",
    "training.max_minutes=null",
]


@pytest.mark.slow
def test_the_quickstart_script_trains_exports_and_translates_stdin(tmp_path, data_dir):
    """The script and its config, copied into a checkout of their own (the script writes
    ``runs/`` and ``saved_models/`` beside itself), run with the venv's ``bin`` first on the
    PATH and the checkout not on PYTHONPATH: its 5 translations on stdout are those the
    exported SavedModel gives the same 5 sentences through the Python API."""
    console_script = pathlib.Path(sys.executable).parent / "keras-transformer"
    assert console_script.exists(), f"{console_script}: install the package (the README's pip)"
    checkout = tmp_path / "checkout"
    for part in ("scripts/quickstart.sh", "configs/quickstart.yaml"):
        (checkout / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / part, checkout / part)
    environment = {
        k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "PYTHONPATH")
    }
    environment["PATH"] = os.pathsep.join([str(console_script.parent), environment["PATH"]])
    environment["KT_DATA_DIR"] = str(data_dir)  # the copy has no ../shared/data beside it
    result = subprocess.run(
        ["bash", str(checkout / "scripts" / "quickstart.sh"), *TINY],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    translations = result.stdout.splitlines()[-5:]
    sources = (data_dir / "multi30k" / "test_2016_flickr.en").read_text("utf-8").splitlines()[:5]
    assert all(line in result.stderr for line in sources)  # the script shows what it translates

    from keras_transformer.inference.saved_model import SavedModelTranslator

    saved = checkout / "saved_models" / "quickstart"
    assert (checkout / "runs" / "quickstart" / "finished.json").exists()
    assert SavedModelTranslator(saved).translate(sources) == translations
