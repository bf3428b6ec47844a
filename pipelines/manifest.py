# The bookkeeping of pipelines.prepare: what is in an output folder, and writes that never leave a
# half-written file under a name a reader would take for complete.
"""Output-folder bookkeeping for ``pipelines.prepare``: manifest, fingerprints, atomic writes.

Everything is written under a temporary name (``<name>.tmp-<pid>-<random>``) and renamed into
place; ``remove_stale_temporaries`` deletes what a killed job left behind.

Example::

    manifest = read_manifest("runs/m30k")          # {} when there is none yet
    write_json_atomic(pathlib.Path("runs/m30k") / MANIFEST, manifest)
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import uuid

__all__ = [
    "FORMAT_VERSION",
    "MANIFEST",
    "MODEL_FILE",
    "sha256_file",
    "sha256_json",
    "tmp_name",
    "write_json_atomic",
    "read_manifest",
    "remove_stale_temporaries",
]

#: Version of the output layout; a manifest of another version is ignored (everything is redone).
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
#: The SentencePiece model, next to the tokenizer folder, for tools outside TensorFlow.
MODEL_FILE = "sentencepiece.model"


def sha256_file(path, chunk: int = 1 << 20) -> str:
    """sha256 hex digest of a file, streamed."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def sha256_json(value) -> str:
    """sha256 hex digest of a JSON value (keys sorted): the fingerprint of options and inputs."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()


def tmp_name(path: pathlib.Path) -> pathlib.Path:
    """A unique temporary sibling of ``path`` (``<name>.tmp-<pid>-<8 hex>``)."""
    return path.with_name(f"{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")


def write_json_atomic(path: pathlib.Path, value) -> None:
    """Write ``value`` as indented JSON to a temporary file, then rename it to ``path``."""
    tmp = tmp_name(path)
    tmp.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_manifest(output_dir) -> dict:
    """The manifest of an output folder, or an empty one."""
    path = pathlib.Path(output_dir) / MANIFEST
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        return {}


def remove_stale_temporaries(output: pathlib.Path) -> None:
    """Delete the temporary files and folders (``*.tmp-*``) a killed job left in ``output``."""
    for stale in output.glob("*.tmp-*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
