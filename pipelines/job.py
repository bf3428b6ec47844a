# The preprocessing job of pipelines.prepare (paper section 5.1): one shared tokenizer, then the
# tokenized shards of every split, each step skipped when the manifest shows it is up to date.
"""The ``prepare`` job: tokenizer (reused or trained) + TFRecord shards per split + manifest.

See ``pipelines.prepare`` for the command line and the output folder. Input specs come from
``pipelines.inputs``, shards are written by ``pipelines.shards``.

Example::

    spec = files_spec("train", "train.en", "train.de")
    manifest = prepare([spec], "runs/prep", vocab_size=8000, num_shards=2)
"""

from __future__ import annotations

import hashlib
import math
import os
import pathlib
import shutil
import time
from collections.abc import Sequence

from pipelines import remote, storage
from pipelines.inputs import PrepareError, describe_inputs, spec_paths, training_text
from pipelines.manifest import (
    FORMAT_VERSION,
    MANIFEST,
    MODEL_FILE,
    read_manifest,
    remove_stale_temporaries,
    sha256_json,
    tmp_name,
    write_json_atomic,
)
from pipelines.shards import split_is_current, write_split

__all__ = ["PAIRS_PER_SHARD", "RUNNERS", "prepare"]

#: How the shards are written: a local process/thread pool, or an Apache Beam pipeline.
RUNNERS = ("pool", "beam")

#: Pairs per shard when ``num_shards`` is not given (at most 1024 shards per split).
PAIRS_PER_SHARD = 200_000

# keras_transformer (and with it TensorFlow) is imported inside the functions that need it, so
# that the command line's ``--help`` and argument errors answer at once.


def _tokenizer(
    output: pathlib.Path, tokenizer_dir, train_spec: dict, options: dict, previous: dict, log
):
    """Reuse the given tokenizer, or the output folder's if trained on the same inputs with the
    same options, else train on ``train_spec``. Returns (tokenizer, manifest "origin" fields)."""
    from keras_transformer.text.tokenizer import TOKENIZER_DIR, SubwordTokenizer

    if tokenizer_dir is not None:
        if storage.is_remote(tokenizer_dir):
            tokenizer = remote.load_tokenizer_remote(tokenizer_dir)
        else:
            tokenizer = SubwordTokenizer.load(tokenizer_dir)
        log(f"tokenizer: reusing {tokenizer_dir} (vocab {tokenizer.vocab_size})")
        reused = (
            tokenizer_dir if storage.is_remote(tokenizer_dir) else os.path.abspath(tokenizer_dir)
        )
        return tokenizer, {"reused_from": reused}
    origin = {"trained_on_split": train_spec["split"], "options": options}
    folder = storage.join(output, TOKENIZER_DIR)
    if previous.get("fingerprint") == sha256_json(options) and _tokenizer_saved(folder):
        log(f"tokenizer: up to date in {folder}")
        if storage.is_remote(folder):
            return remote.load_tokenizer_remote(folder, "the output's tokenizer"), origin
        return SubwordTokenizer.load(folder), origin
    log(
        f"tokenizer: training {options['model_type']} vocab {options['vocab_size']} on split "
        f"{train_spec['split']!r}"
    )
    tokenizer = SubwordTokenizer.train(
        training_text(train_spec),
        options["vocab_size"],
        model_type=options["model_type"],
        max_sentences=options["max_sentences"],
        seed=options["seed"],
    )
    return tokenizer, origin


def _tokenizer_saved(folder) -> bool:
    return remote.tokenizer_is_saved(folder) if storage.is_remote(folder) else folder.is_dir()


def _save_tokenizer(tokenizer, output, previous: dict) -> str:
    """Write ``tokenizer/`` (atomically, when its model changed) and the ``.model``; its sha256."""
    from keras_transformer.text.tokenizer import TOKENIZER_DIR

    model_sha = hashlib.sha256(tokenizer.model_proto).hexdigest()
    folder = storage.join(output, TOKENIZER_DIR)
    replace = previous.get("model_sha256") != model_sha or not _tokenizer_saved(folder)
    if storage.is_remote(output):
        remote.save_tokenizer_remote(tokenizer, folder, storage.join(output, MODEL_FILE), replace)
        return model_sha
    if replace:
        tmp = tmp_name(folder)
        tokenizer.save(tmp)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    tokenizer.write_model(output / MODEL_FILE)
    return model_sha


def _write_shards(spec, tokenizer, output, shards, count, max_sentence_length, job) -> dict:
    """One split's shards by the local pool or by Beam; the summary for the manifest."""
    if job["runner"] == "beam":
        from pipelines.beam import write_split_beam

        return write_split_beam(
            spec,
            tokenizer,
            output,
            shards,
            max_sentence_length,
            count=count,
            beam_options=job["beam_options"],
            workers=job["workers"],
        )
    workers = max(1, min(shards, job["workers"] or os.cpu_count() or 1))
    return write_split(
        spec, tokenizer, output, shards, max_sentence_length, workers, job["executor"]
    )


def _prepare_split(
    spec,
    described,
    tokenizer,
    model_sha,
    manifest,
    output,
    *,
    num_shards,
    max_sentence_length,
    job,
    log,
) -> None:
    """Write one split's shards into ``output`` unless the manifest says they are current.

    ``job``: how to write them (``workers``, ``executor``, ``runner``, ``beam_options``)."""
    split = spec["split"]
    inputs_meta, count = described
    shards = num_shards or max(1, min(1024, math.ceil((count or 1) / PAIRS_PER_SHARD)))
    # "max_length" is the fingerprint's key from before the rename to max_sentence_length: kept,
    # so that folders prepared by earlier versions stay current.
    fingerprint = sha256_json(
        {
            "inputs": [i["sha256"] for i in inputs_meta],
            "model_sha256": model_sha,
            "max_length": max_sentence_length,
            "num_shards": shards,
            "format_version": FORMAT_VERSION,
            # only for Beam, so that folders of earlier versions stay current
            **({"runner": "beam"} if job["runner"] == "beam" else {}),
        }
    )
    entry = manifest["splits"].get(split)
    if split_is_current(entry, fingerprint, output):
        log(f"{split}: up to date ({entry['kept']} pairs in {entry['num_shards']} shards)")
        entry["reused"] = True
        return
    split_started = time.time()
    # The split's old shards are about to be replaced: unlist them first, so that a job killed
    # while the new ones are renamed into place leaves no split that reads as complete.
    if manifest["splits"].pop(split, None) is not None:
        write_json_atomic(storage.join(output, MANIFEST), manifest)
    result = _write_shards(spec, tokenizer, output, shards, count, max_sentence_length, job)
    manifest["splits"][split] = {
        "fingerprint": fingerprint,
        "inputs": inputs_meta,
        "seconds": round(time.time() - split_started, 2),
        "reused": False,
        **result,
    }
    write_json_atomic(storage.join(output, MANIFEST), manifest)
    log(
        f"{split}: {result['kept']} of {result['pairs']} pairs kept "
        f"(dropped {result['dropped']}) in {shards} shard(s)"
    )


def _check_inputs(inputs: Sequence[dict], runner: str, output_dir) -> None:
    if runner not in RUNNERS:
        raise PrepareError(f"runner must be one of {RUNNERS}, not {runner!r}")
    paths = [output_dir] + [path for spec in inputs for path in spec_paths(spec)]
    remote_paths = [str(path) for path in paths if storage.is_remote(path)]
    if runner != "beam" and remote_paths:
        raise PrepareError(
            f"{remote_paths[0]}: the process pool reads and writes local paths only; "
            "use --runner beam for remote (scheme://) paths"
        )
    if not inputs:
        raise PrepareError("nothing to prepare: give --source/--target, --tsv, --dataset or --tfds")
    split_names = [spec["split"] for spec in inputs]
    if len(set(split_names)) != len(split_names):
        raise PrepareError(f"split names must be unique, got {split_names}")


def _job_fields(tokenizer, model_sha: str, origin: dict, max_sentence_length: int) -> dict:
    """The manifest's top-level fields for this run (the splits are added one by one)."""
    from keras_transformer.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, TOKENIZER_DIR, UNK_ID

    return {
        "format_version": FORMAT_VERSION,
        "created_by": "pipelines.prepare",
        "max_sentence_length": max_sentence_length,
        "reserved_ids": {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID},
        "tokenizer": {
            "path": TOKENIZER_DIR,
            "model_file": MODEL_FILE,
            "vocab_size": tokenizer.vocab_size,
            "model_sha256": model_sha,
            **origin,
        },
    }


def _start_manifest(output, force: bool) -> dict:
    if storage.is_remote(output):
        storage.mkdirs(output)
    else:
        output.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(output)
    manifest = {} if force else read_manifest(output)
    if manifest.get("format_version") not in (None, FORMAT_VERSION):
        manifest = {}
    manifest.pop("max_length", None)  # written as "max_sentence_length" since the rename
    return manifest


def prepare(
    inputs: Sequence[dict],
    output_dir,
    *,
    vocab_size: int = 8000,
    tokenizer_dir=None,
    num_shards: int | None = None,
    max_sentence_length: int = 256,
    model_type: str = "bpe",
    max_sentences: int = 2_000_000,
    seed: int = 0,
    workers: int | None = None,
    executor: str = "thread",
    force: bool = False,
    runner: str = "pool",
    beam_options: str | None = None,
    log=print,
) -> dict:
    """Run the job for input specs (``pipelines.inputs``); returns the manifest.

    The tokenizer is reused (``tokenizer_dir``, or the output folder's when trained on the same
    inputs with the same options) or trained on the "train" split (else the first). Pairs with
    an empty side or a side over ``max_sentence_length`` subwords (EOS included) are dropped.
    ``runner="pool"`` writes the shards with ``workers`` threads or processes (``executor``);
    ``runner="beam"`` with an Apache Beam pipeline (``pipelines.beam``) run with
    ``beam_options`` (a command-line string; default: the local ``FnApiRunner`` with
    ``workers`` processes).

    Example::

        spec = files_spec("train", "train.en", "train.de")
        manifest = prepare([spec], "runs/prep", vocab_size=8000, num_shards=2)
        manifest["splits"]["train"]["kept"]
    """
    _check_inputs(inputs, runner, output_dir)
    # a remote folder (gs://..., --runner beam) stays a string: pathlib would fold its "//"
    output = output_dir if storage.is_remote(output_dir) else pathlib.Path(output_dir)
    manifest = _start_manifest(output, force)
    started = time.time()
    described = {spec["split"]: describe_inputs(spec) for spec in inputs}

    train_spec = next((s for s in inputs if s["split"] == "train"), inputs[0])
    options = {
        "vocab_size": vocab_size,
        "model_type": model_type,
        "seed": seed,
        "max_sentences": max_sentences,
        "trained_on": [i["sha256"] for i in described[train_spec["split"]][0]],
    }
    previous = manifest.get("tokenizer", {})
    tokenizer, origin = _tokenizer(output, tokenizer_dir, train_spec, options, previous, log)
    model_sha = _save_tokenizer(tokenizer, output, previous)
    manifest.update(_job_fields(tokenizer, model_sha, origin, max_sentence_length))
    manifest["tokenizer"]["fingerprint"] = (
        sha256_json(options) if tokenizer_dir is None else "reused:" + model_sha
    )
    manifest.setdefault("splits", {})
    write_json_atomic(storage.join(output, MANIFEST), manifest)
    job = {"workers": workers, "executor": executor, "runner": runner, "beam_options": beam_options}
    for spec in inputs:
        _prepare_split(
            spec,
            described[spec["split"]],
            tokenizer,
            model_sha,
            manifest,
            output,
            num_shards=num_shards,
            max_sentence_length=max_sentence_length,
            job=job,
            log=log,
        )
    manifest["seconds"] = round(time.time() - started, 2)
    write_json_atomic(storage.join(output, MANIFEST), manifest)
    return manifest
