# The corpora pipelines.prepare can read, as picklable "input specs" (plain dicts), so that a
# process worker can reopen the same corpus from its spec alone.
"""Input specs of ``pipelines.prepare``: build them, open them as string pairs, describe them.

A spec is a dict with ``"split"`` and ``"kind"`` (``"files"``, ``"tsv"`` or ``"tfds"``) plus
what that kind needs. ``describe_inputs`` validates text inputs and gives the sha256 of each
input for the manifest's fingerprints.

Example::

    spec = files_spec("train", "multi30k/train.en", "multi30k/train.de")
    pairs = open_pairs(spec)                 # tf.data.Dataset of (source, target) strings
    inputs, count = describe_inputs(spec)    # [{"path", "sha256", "bytes"}, ...], 29000
"""

from __future__ import annotations

import os
import pathlib

from pipelines import storage
from pipelines.manifest import sha256_file, sha256_json

__all__ = [
    "PrepareError",
    "files_spec",
    "tsv_spec",
    "tfds_spec",
    "open_pairs",
    "describe_inputs",
    "training_text",
    "spec_paths",
    "is_remote_spec",
]


class PrepareError(RuntimeError):
    """A job that cannot run as configured (message says why)."""


def _is_file(path) -> bool:
    return storage.exists(path) if storage.is_remote(path) else os.path.isfile(path)


def _absolute(path) -> str:
    return path if storage.is_remote(path) else os.path.abspath(path)


def files_spec(split: str, source, target) -> dict:
    """Spec of two line-aligned files; raises ``PrepareError`` naming a missing file.

    Paths may be remote (``gs://...``: read through Beam's ``FileSystems``, ``--runner beam``)."""
    for path in (source, target):
        if not _is_file(path):
            raise PrepareError(f"split {split!r}: input file not found: {path}")
    return {
        "split": split,
        "kind": "files",
        "source": _absolute(source),
        "target": _absolute(target),
    }


def tsv_spec(split: str, path, source_column: int = 0, target_column: int = 1) -> dict:
    """Spec of a tab-separated file (local or remote); raises ``PrepareError`` if missing."""
    if not _is_file(path):
        raise PrepareError(f"TSV file not found: {path}")
    return {
        "split": split,
        "kind": "tsv",
        "path": _absolute(path),
        "source_column": source_column,
        "target_column": target_column,
    }


def tfds_spec(
    split: str, name: str, source_lang: str, target_lang: str, data_dir=None, download: bool = False
) -> dict:
    """Spec of one split of a tensorflow-datasets translation dataset."""
    return {
        "split": split,
        "kind": "tfds",
        "name": name,
        "tfds_split": split,
        "source_lang": source_lang,
        "target_lang": target_lang,
        "data_dir": data_dir,
        "download": download,
    }


def spec_paths(spec: dict) -> list:
    """The files of a text spec (none for TFDS)."""
    return [spec[key] for key in ("source", "target", "path") if key in spec]


def is_remote_spec(spec: dict) -> bool:
    """Whether a spec's files are on a remote file system (``scheme://...``)."""
    return any(storage.is_remote(path) for path in spec_paths(spec))


def open_pairs(spec: dict):
    """Dataset of (source, target) strings for an input spec (picklable dict)."""
    from keras_transformer import data

    if spec["kind"] == "files":
        return data.read_parallel_text(spec["source"], spec["target"], validate=False)
    if spec["kind"] == "tsv":
        return data.read_tsv(
            spec["path"], spec["source_column"], spec["target_column"], validate=False
        )
    if spec["kind"] == "tfds":
        return data.load_tfds(
            spec["name"],
            spec["tfds_split"],
            spec["source_lang"],
            spec["target_lang"],
            data_dir=spec["data_dir"],
            download=False,
        )
    raise PrepareError(f"unknown input kind {spec['kind']!r}")


def _describe_file(path: str, **extra) -> dict:
    return {"path": path, "sha256": sha256_file(path), "bytes": os.path.getsize(path), **extra}


def _describe_tfds(spec: dict) -> tuple[list, int | None]:
    import tensorflow_datasets as tfds

    builder = tfds.builder(spec["name"], data_dir=spec["data_dir"])
    if spec.get("download"):
        builder.download_and_prepare()
    count = None
    try:
        count = builder.info.splits[spec["tfds_split"]].num_examples
    except (KeyError, ValueError):
        pass
    identity = {
        "tfds": spec["name"],
        "version": str(builder.info.version),
        "split": spec["tfds_split"],
        "languages": [spec["source_lang"], spec["target_lang"]],
    }
    return [{**identity, "sha256": sha256_json(identity)}], count


def describe_inputs(spec: dict) -> tuple[list, int | None]:
    """(inputs with sha256 for the manifest, number of pairs if known). Validates text files."""
    from keras_transformer import data

    if is_remote_spec(spec):
        from pipelines.remote import describe_remote

        return describe_remote(spec)
    if spec["kind"] == "files":
        count = data.validate_parallel_files(spec["source"], spec["target"])
        return [_describe_file(spec[key]) for key in ("source", "target")], count
    if spec["kind"] == "tsv":
        columns = [spec["source_column"], spec["target_column"]]
        count = data.validate_tsv_file(spec["path"], *columns)
        return [_describe_file(spec["path"], columns=columns)], count
    if spec["kind"] == "tfds":
        return _describe_tfds(spec)
    raise PrepareError(f"unknown input kind {spec['kind']!r}")


def training_text(spec: dict):
    """What the tokenizer trains on: file paths, or an iterator of strings for TFDS/TSV and
    remote files (the same sentences in the same order)."""
    if is_remote_spec(spec):
        from pipelines.remote import training_text_remote

        return training_text_remote(spec)
    if spec["kind"] == "files":
        return [pathlib.Path(spec["source"]), pathlib.Path(spec["target"])]
    pairs = open_pairs(spec)

    def sentences():
        for source, target in pairs.as_numpy_iterator():
            yield source.decode("utf-8")
            yield target.decode("utf-8")

    return sentences()
