"""Training from prepared shards (``keras-transformer prepare``): check a folder, find its parts.

A prepared folder holds ``manifest.json``, the tokenizer the shards were made with
(``tokenizer/``) and, per split, TFRecord shards of token ids. ``data.shards: DIR`` in a training
config makes ``train`` read the ids from there and never open the raw text: the tokenizer comes
from the folder (a ``data.tokenizer`` that names another one is refused, naming both), the
training pairs from the ``train`` split and the validation pairs from ``validation`` if the folder
has it. A folder without a manifest, or whose manifest lists a shard that is missing, is refused
before anything trains. The folder may be a URL (``gs://``, ``s3://``, ``hdfs://``: any file
system registered with TensorFlow): the manifest and tokenizer are read through ``tf.io.gfile``
and ``tf.data`` reads the shards in place.
"""

from __future__ import annotations

import hashlib
import json

from keras_transformer.text.lines import DataError
from keras_transformer.text.vocabulary import TOKENIZER_DIR
from keras_transformer.training.run_config import data_path

MANIFEST = "manifest.json"
VALIDATION_SPLITS = ("validation", "val", "dev")


class ShardsError(DataError):
    """A ``data.shards`` folder that cannot be trained from; the message names the folder."""


def read_prepared(folder) -> dict:
    """The manifest of a prepared folder, checked: its tokenizer and the shards it lists exist."""
    folder = data_path(folder)  # a URL (gs://...) is read in place through tf.io.gfile
    path = folder / MANIFEST
    try:
        found = folder.is_dir()
    except FileNotFoundError as error:  # a URL of a file system TensorFlow does not have
        raise ShardsError(f"data.shards={error}") from None
    if not found:
        raise ShardsError(f"data.shards={folder}: no such folder")
    if not path.is_file():
        raise ShardsError(
            f"data.shards={folder}: no {MANIFEST}; it is not a prepared folder, or its "
            "preparation did not finish (rerun keras-transformer prepare)"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ShardsError(f"{path}: not valid JSON ({error})") from error
    splits = manifest.get("splits", {})
    if "train" not in splits:
        raise ShardsError(f"{path}: no 'train' split (splits: {sorted(splits)})")
    for name, split in splits.items():
        missing = [s for s in split.get("shards", []) if not (folder / s).is_file()]
        if missing or not split.get("shards"):
            raise ShardsError(
                f"{path}: split {name!r} is incomplete (missing shards: {missing or 'all'}); "
                "rerun keras-transformer prepare on the same inputs"
            )
    if not tokenizer_folder(folder).is_dir():
        raise ShardsError(f"{path}: the tokenizer folder {tokenizer_folder(folder)} is missing")
    return manifest


def tokenizer_folder(folder):
    """``<folder>/tokenizer``: a ``pathlib.Path``, or a ``GFilePath`` for a URL."""
    return data_path(folder) / TOKENIZER_DIR


def model_sha256(tokenizer) -> str:
    return hashlib.sha256(tokenizer.model_proto).hexdigest()


def check_tokenizer(folder, manifest: dict, tokenizer, named_by: str | None) -> None:
    """Refuses a tokenizer other than the one the shards were made with."""
    expected = manifest.get("tokenizer", {}).get("model_sha256")
    if expected and model_sha256(tokenizer) != expected:
        where = named_by or "the run directory's tokenizer/"
        raise ShardsError(
            f"the tokenizer {where} is not the one the shards in {data_path(folder)} were made "
            f"with ({tokenizer_folder(folder)}, sha256 {expected[:12]}...): drop data.tokenizer "
            "or prepare the shards with it (keras-transformer prepare --tokenizer ...)"
        )


def validation_split(manifest: dict) -> str | None:
    """The manifest's validation split name, or None."""
    return next((name for name in VALIDATION_SPLITS if name in manifest.get("splits", {})), None)
