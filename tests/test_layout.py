"""The code layout the project promises: the model's flow found in one module, imports that
follow the flow (the model knows no training or inference, inference no training, the library
no offline job), one formatter and linter. Module and function sizes follow from their concepts:
no number caps them."""

import ast
import json
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
CODE_DIRS = ("keras_transformer", "pipelines", "benchmarks", "scripts")
MODEL_MODULE = REPO / "keras_transformer" / "model.py"
# Names of the functional model's layers: only keras_transformer/model.py may look them up.
LAYER_NAMES = re.compile(
    r"get_layer\(|[\"'](shared_embedding|source_embedding|target_embedding|source_padding_mask|"
    r"(encoder|decoder)_(block_\d*|positional_encoding|dropout|norm))[\"'{]"
)
# (package or module, what it must not import): the flow runs one way.
FORBIDDEN_IMPORTS = (
    ("keras_transformer/model.py", ("keras_transformer.training", "keras_transformer.inference")),
    ("keras_transformer/layers", ("keras_transformer.training", "keras_transformer.inference")),
    ("keras_transformer/config.py", ("keras_transformer.training", "keras_transformer.inference")),
    ("keras_transformer/text", ("keras_transformer.model", "keras_transformer.data")),
    ("keras_transformer/text", ("keras_transformer.training", "keras_transformer.inference")),
    ("keras_transformer/data", ("keras_transformer.training", "keras_transformer.inference")),
    ("keras_transformer/inference", ("keras_transformer.training", "keras_transformer.cli")),
    ("keras_transformer/training", ("keras_transformer.cli",)),
)


def _python_files():
    for folder in CODE_DIRS:
        yield from sorted((REPO / folder).rglob("*.py"))


def _notebook_code(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def test_no_layer_is_found_by_name_outside_the_model_module():
    offenders = []
    sources = [(p, p.read_text(encoding="utf-8")) for p in _python_files() if p != MODEL_MODULE]
    sources += [(p, _notebook_code(p)) for p in sorted((REPO / "notebooks").glob("*.ipynb"))]
    for path, text in sources:
        for number, line in enumerate(text.splitlines(), 1):
            if LAYER_NAMES.search(line):
                offenders.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not offenders, "layer names outside model.py:\n" + "\n".join(offenders)
    assert LAYER_NAMES.search(MODEL_MODULE.read_text()), "the pattern no longer matches model.py"


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def test_imports_follow_the_flow():
    """Nothing earlier in the flow imports something later, and only the command line imports
    the offline jobs of ``pipelines/``."""
    offenders = []
    for place, forbidden in FORBIDDEN_IMPORTS:
        path = REPO / place
        for module in [path] if path.is_file() else sorted(path.rglob("*.py")):
            bad = {name for name in _imports(module) if name.startswith(forbidden)}
            offenders += [f"{module.relative_to(REPO)} imports {name}" for name in sorted(bad)]
    for module in sorted((REPO / "keras_transformer").rglob("*.py")):
        if "cli" not in module.relative_to(REPO).parts:
            bad = {name for name in _imports(module) if name.split(".")[0] == "pipelines"}
            offenders += [f"{module.relative_to(REPO)} imports {name}" for name in sorted(bad)]
    assert not offenders, "\n".join(offenders)


def test_ruff_lint_and_format_pass():
    ruff = shutil.which("ruff") or str(pathlib.Path(sys.executable).with_name("ruff"))
    if not pathlib.Path(ruff).exists():
        pytest.fail("ruff is not installed (it is in the [dev] extra)")
    for command in ([ruff, "check", "."], [ruff, "format", "--check", "."]):
        result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
        assert result.returncode == 0, f"{' '.join(command[1:])}:\n{result.stdout}{result.stderr}"
