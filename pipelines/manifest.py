# The bookkeeping of pipelines.prepare: what is in an output folder, and writes that never leave a
# half-written file under a name a reader would take for complete.
"""Output-folder bookkeeping for ``pipelines.prepare``: manifest, fingerprints, atomic writes.

Everything is written under a temporary name (``<name>.tmp-<pid>-<random>``) and renamed into
place; ``remove_stale_temporaries`` deletes what a killed job left behind. An output folder given
as ``scheme://...`` (``prepare --runner beam`` on gs://, s3://, hdfs://) is read and written through
Beam's ``FileSystems`` (``pipelines.storage``): then renames are of files (object stores have no
folders) and the temporaries of a killed job are the files under ``*.tmp-*``.

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

from pipelines import storage

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


def tmp_name(path):
    """A unique temporary sibling of ``path`` (``<name>.tmp-<pid>-<8 hex>``); a string for a
    remote path (``scheme://...``), else a ``pathlib.Path``."""
    suffix = f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    if storage.is_remote(path):
        return path + suffix
    path = pathlib.Path(path)
    return path.with_name(path.name + suffix)


def write_json_atomic(path, value) -> None:
    """Write ``value`` as indented JSON to a temporary file, then rename it to ``path``."""
    tmp = tmp_name(path)
    text = json.dumps(value, indent=2, sort_keys=True) + "\n"
    if storage.is_remote(path):
        storage.write_bytes(tmp, text.encode("utf-8"))
        storage.rename(tmp, path)
        return
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def read_manifest(output_dir) -> dict:
    """The manifest of an output folder, or an empty one."""
    if storage.is_remote(output_dir):
        path = storage.join(output_dir, MANIFEST)
        text = storage.read_bytes(path).decode("utf-8") if storage.exists(path) else None
    else:
        path = pathlib.Path(output_dir) / MANIFEST
        text = path.read_text(encoding="utf-8") if path.is_file() else None
    if text is None:
        return {}
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return {}


def _remove_stale_remote(output: str) -> None:
    stale = storage.glob(storage.join(output, "*.tmp-*"))
    inside = storage.glob(storage.join(output, "*.tmp-*", "**"))
    storage.delete(stale + inside)
    tops = {path[len(output) :].lstrip("/").split("/", 1)[0] for path in inside}
    for top in sorted(tops):  # the (now empty) folders, where the file system has them
        storage.remove_tree(storage.join(output, top))


def remove_stale_temporaries(output) -> None:
    """Delete the temporary files and folders (``*.tmp-*``) a killed job left in ``output``."""
    if storage.is_remote(output):
        _remove_stale_remote(output)
        return
    for stale in pathlib.Path(output).glob("*.tmp-*"):
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
