# The driver-side steps of pipelines.prepare that read or write files, for inputs and output on a
# file system the driver does not mount (gs://, s3://, hdfs://): through pipelines.storage.
"""Remote inputs and output of ``prepare --runner beam``: validate, describe, sample, tokenizer.

The same checks and error messages as the local path (``keras_transformer.data``): a missing
file, parallel files of different line counts, a line that is not UTF-8 (file and line), a TSV
line with too few columns. Lines are split on ``"\\n"`` as ``tf.data.TextLineDataset`` splits
them. The tokenizer trains on the same seeded reservoir sample of ``--max-sentences`` lines as
for local files, streamed from the remote files into memory (SentencePiece trains from that
in-memory sample, not from files), so a remote run trains the same tokenizer as a local run on
the same corpus and needs no local copy of it. Tokenizer folders are written locally
(``tf.saved_model.save``) and copied through Beam's ``FileSystems``, not ``tf.io.gfile``: one set
of file-system plugins (Beam's, which the workers need anyway) serves the whole job.

Example::

    inputs, count = describe_remote(files_spec("train", "gs://b/train.en", "gs://b/train.de"))
"""

from __future__ import annotations

import hashlib
import tempfile

from pipelines import storage

__all__ = [
    "describe_remote",
    "remote_lines",
    "training_text_remote",
    "load_tokenizer_remote",
    "save_tokenizer_remote",
    "tokenizer_is_saved",
]


def remote_lines(path: str):
    """(line number, text) of a UTF-8 file, ``"\\r\\n"`` stripped as ``textfile.iter_lines``."""
    from keras_transformer.text.lines import _decode  # the library's message for a bad line

    with storage.open_read(path) as handle:
        for number, raw in enumerate(iter(handle.readline, b""), start=1):
            yield number, _decode(raw, path, number).rstrip("\r\n")


def _describe_file(path: str, **extra) -> dict:
    digest, total = hashlib.sha256(), 0
    with storage.open_read(path, decompress=False) as handle:
        while block := handle.read(1 << 20):
            digest.update(block)
            total += len(block)
    return {"path": path, "sha256": digest.hexdigest(), "bytes": total, **extra}


def _count_lines(path: str) -> int:
    return sum(1 for _ in remote_lines(path))


def _count_tsv(path: str, columns: list) -> int:
    from keras_transformer.text.lines import DataError

    need = max(columns) + 1
    count = 0
    for count, line in remote_lines(path):
        found = line.count("\t") + 1
        if found < need:
            raise DataError(
                f"{path}, line {count}: {found} tab-separated column(s), need at least {need}"
            )
    return count


def describe_remote(spec: dict) -> tuple[list, int]:
    """``pipelines.inputs.describe_inputs`` for remote text inputs: validated, with sha256."""
    from keras_transformer.text.lines import DataError

    if spec["kind"] == "tsv":
        columns = [spec["source_column"], spec["target_column"]]
        count = _count_tsv(spec["path"], columns)
        return [_describe_file(spec["path"], columns=columns)], count
    source, target = spec["source"], spec["target"]
    source_lines, target_lines = _count_lines(source), _count_lines(target)
    if source_lines != target_lines:
        raise DataError(
            f"parallel files differ in line count: {source} has {source_lines} lines, "
            f"{target} has {target_lines} lines"
        )
    return [_describe_file(source), _describe_file(target)], source_lines


def training_text_remote(spec: dict):
    """The sentences the tokenizer trains on, in the local path's order: every source line then
    every target line (files), or source and target of each row (TSV)."""
    if spec["kind"] == "files":
        for path in (spec["source"], spec["target"]):
            yield from (line for _, line in remote_lines(path))
        return
    for _, line in remote_lines(spec["path"]):
        fields = line.split("\t")
        yield fields[spec["source_column"]]
        yield fields[spec["target_column"]]


def load_tokenizer_remote(path: str, argument: str = "--tokenizer"):
    """A ``SubwordTokenizer`` from a remote ``.model`` file or tokenizer folder (its
    ``assets.extra/sentencepiece.model``, which ``SubwordTokenizer.save`` writes)."""
    from keras_transformer.text.sentencepiece_model import EXTRA_MODEL_FILE
    from keras_transformer.text.tokenizer import SubwordTokenizer
    from pipelines.inputs import PrepareError

    # the folder's model first: on file systems with folders, exists() is true for a folder too
    for candidate in (storage.join(path, *EXTRA_MODEL_FILE.split("/")), path):
        if storage.exists(candidate):
            return SubwordTokenizer(storage.read_bytes(candidate))
    raise PrepareError(
        f"{argument} {path}: no tokenizer there (a .model file, or a folder written by "
        f"SubwordTokenizer.save, with {EXTRA_MODEL_FILE})"
    )


def save_tokenizer_remote(tokenizer, folder: str, model_file: str, replace: bool) -> None:
    """``tokenizer/`` (when ``replace``) and the ``.model``/``.vocab`` beside it, written locally
    and copied to temporary siblings, then renamed file by file into place: the model file
    inside the folder (what ``tokenizer_is_saved`` looks for) last."""
    from keras_transformer.text.sentencepiece_model import EXTRA_MODEL_FILE
    from pipelines.manifest import tmp_name

    staged, tmp_folder = [], tmp_name(folder)
    with tempfile.TemporaryDirectory(prefix="kt-tokenizer-") as local:
        if replace:
            tokenizer.save(f"{local}/tokenizer")
            uploaded = storage.upload_tree(f"{local}/tokenizer", tmp_folder)
            marker = storage.join(tmp_folder, *EXTRA_MODEL_FILE.split("/"))
            uploaded.sort(key=lambda path: path == marker)
            staged += [(path, folder + path[len(tmp_folder) :]) for path in uploaded]
        model_path = tokenizer.write_model(f"{local}/model/sentencepiece.model")
        vocab_path = model_path[: -len(".model")] + ".vocab"
        vocab_file = model_file[: -len(".model")] + ".vocab"
        for local_file, target in ((model_path, model_file), (vocab_path, vocab_file)):
            tmp = tmp_name(target)
            with open(local_file, "rb") as handle:
                storage.write_bytes(tmp, handle.read())
            staged.append((tmp, target))
    if replace:
        storage.remove_tree(folder)
    for source, target in staged:
        storage.rename(source, target)
    storage.remove_tree(tmp_folder)


def tokenizer_is_saved(folder: str) -> bool:
    """Whether a remote tokenizer folder is complete (its model file is renamed in last)."""
    from keras_transformer.text.sentencepiece_model import EXTRA_MODEL_FILE

    return storage.exists(storage.join(folder, *EXTRA_MODEL_FILE.split("/")))
