"""Every notebook in notebooks/ runs top to bottom in a real Jupyter kernel (test size).

The kernel is this interpreter (``sys.executable``, so the venv running pytest: ``.venv``, CI's
``.venv-ci``), through a kernelspec written to a temporary folder: no kernelspec needs to be
installed, and none installed elsewhere is picked up by mistake. Each notebook runs with
``KT_NOTEBOOK_SIZE=test`` (tiny model, a few dozen steps: well under two minutes each on two cores)
and writes only under a temporary ``KT_NOTEBOOK_OUTPUT``.

Run just these with ``python -m pytest tests/test_notebooks.py -q``.
"""

import json
import pathlib
import sys

import ipykernel  # noqa: F401  (the kernel the notebooks run in: the dev extra)
import matplotlib  # noqa: F401
import nbclient
import nbformat
import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = REPO_ROOT / "notebooks"
NOTEBOOKS = ["01_quickstart.ipynb", "02_attention.ipynb", "03_serving.ipynb"]
KERNEL_NAME = "keras-transformer-tests"
CELL_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def kernel_spec_manager(tmp_path_factory):
    from jupyter_client.kernelspec import KernelSpecManager

    kernels = tmp_path_factory.mktemp("kernels")
    spec = kernels / KERNEL_NAME
    spec.mkdir()
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": f"Python ({sys.executable})",
                "language": "python",
            }
        )
    )
    manager = KernelSpecManager(kernel_dirs=[str(kernels)])
    assert manager.get_kernel_spec(KERNEL_NAME).argv[0] == sys.executable
    return manager


def _snapshot(folder: pathlib.Path) -> dict:
    return {
        str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_the_notebooks_are_there():
    assert sorted(p.name for p in NOTEBOOK_DIR.glob("*.ipynb")) == NOTEBOOKS


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebook_is_stored_with_outputs(name):
    """Readers on GitHub see results: every code cell ran, in order, without errors."""
    nb = nbformat.read(NOTEBOOK_DIR / name, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    counts = [cell.get("execution_count") for cell in code]
    assert all(counts), f"{name}: cells without an execution count (not executed): {counts}"
    assert counts == sorted(counts), f"{name}: cells were not run top to bottom: {counts}"
    outputs = [output for cell in code for output in cell.get("outputs", [])]
    errors = [output for output in outputs if output.get("output_type") == "error"]
    assert not errors, (
        f"{name}: stored error output {errors[0].get('ename')}: {errors[0].get('evalue')}"
    )
    if name != "03_serving.ipynb":
        assert any("image/png" in output.get("data", {}) for output in outputs), (
            f"{name}: no figure among the stored outputs"
        )


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_top_to_bottom(name, kernel_spec_manager, tmp_path, monkeypatch, data_dir):
    from jupyter_client.manager import AsyncKernelManager

    output_dir = tmp_path / "outputs"
    monkeypatch.setenv("KT_NOTEBOOK_SIZE", "test")
    monkeypatch.setenv("KT_NOTEBOOK_OUTPUT", str(output_dir))
    monkeypatch.setenv("KT_DATA_DIR", str(data_dir))
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    for variable in ("KT_NOTEBOOK_RUN", "KT_SAVED_MODEL", "KT_TFDS_DATASET"):
        monkeypatch.delenv(variable, raising=False)

    nb = nbformat.read(NOTEBOOK_DIR / name, as_version=4)
    multi30k_before = _snapshot(data_dir / "multi30k")
    kernel = AsyncKernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=kernel_spec_manager)
    client = nbclient.NotebookClient(
        nb,
        km=kernel,
        timeout=CELL_TIMEOUT_S,
        allow_errors=False,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},  # cwd = notebooks/, as in Jupyter
    )
    try:
        # cleanup_kc: shut the kernel down after (nbclient does so by itself only for its own km)
        client.execute(cleanup_kc=True)
    except nbclient.exceptions.CellExecutionError as error:
        pytest.fail(f"{name}: a cell failed:\n{error}")

    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code)
    assert output_dir.is_dir() and any(output_dir.rglob("*")), "the notebook wrote nothing"
    assert _snapshot(data_dir / "multi30k") == multi30k_before, "the notebook changed the data"
    assert not any(NOTEBOOK_DIR.glob("runs")) and not any(NOTEBOOK_DIR.glob("*.png")), (
        "the notebook wrote into notebooks/"
    )
    text = "\n".join(
        output.get("text", "")
        for cell in code
        for output in cell.outputs
        if output.get("output_type") == "stream"
    )
    assert "size: test" in text  # the size switch reached the kernel
