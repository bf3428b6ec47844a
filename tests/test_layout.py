"""The code layout the project promises: the model's flow found in one module, small modules,
short functions, one formatter and linter."""

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
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


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


@pytest.mark.parametrize("path", list(_python_files()), ids=lambda p: str(p.relative_to(REPO)))
def test_modules_are_small_and_functions_short(path):
    text = path.read_text(encoding="utf-8")
    lines = text.count("\n")
    assert lines <= MAX_MODULE_LINES, f"{path.name}: {lines} lines (split it by job)"
    long = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if ast.get_docstring(node):  # the docstring does not count
                doc = node.body[0]
                length -= doc.end_lineno - doc.lineno + 1
            if length > MAX_FUNCTION_LINES:
                long.append(f"{node.name} ({length} lines)")
    assert not long, f"{path.name}: functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_ruff_lint_and_format_pass():
    ruff = shutil.which("ruff") or str(pathlib.Path(sys.executable).with_name("ruff"))
    if not pathlib.Path(ruff).exists():
        pytest.fail("ruff is not installed (it is in the [dev] extra)")
    for command in ([ruff, "check", "."], [ruff, "format", "--check", "."]):
        result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
        assert result.returncode == 0, f"{' '.join(command[1:])}:\n{result.stdout}{result.stderr}"
