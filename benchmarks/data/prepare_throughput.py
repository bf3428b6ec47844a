"""Sentence pairs per second and memory of the prepare job: local process pool vs Beam's runner.

Runs ``keras-transformer prepare`` in a fresh process for each setting: the pool
(``--executor process``) and Beam (``--runner beam``, FnApiRunner), each with 1 and 2 workers,
with one tokenizer trained beforehand (``--tokenizer``), on Multi30k train and 10x
concatenations of it (``--scales``, made in a temporary folder) or on the corpus folders given
by ``--corpus`` (``train.en``/``train.de``, e.g. ``benchmarks.data.synthetic_corpus``'s). Prints,
per run, the pairs, the seconds of the split's job (manifest ``seconds``: validation, chunking,
pipeline, renames) and of the whole command (TensorFlow start-up included), pairs/s for both,
the bytes of shards written, and the peak RSS of every process of the run (the command, its
pool workers, Beam's SDK workers), polled from ``/proc`` (``benchmarks.process_memory``).

Usage::

    KT_DATA_DIR=../shared/data python -m benchmarks.data.prepare_throughput [--scales 1,10] \\
        [--workers 1,2] [--json results/prepare.json]
    python -m benchmarks.data.prepare_throughput --corpus /tmp/wmt_like/x0.1 \\
        --corpus /tmp/wmt_like/x1 --tokenizer /tmp/wmt_like/tokenizer --num-shards 8
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time

from benchmarks.process_memory import run_measured

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def _corpus(folder: pathlib.Path, multi30k: pathlib.Path, scale: int) -> tuple:
    paths = []
    for lang in ("en", "de"):
        text = (multi30k / f"train.{lang}").read_text(encoding="utf-8")
        path = folder / f"train_x{scale}.{lang}"
        path.write_text(text * scale, encoding="utf-8")
        paths.append(path)
    return tuple(paths)


def _tokenizer(folder: pathlib.Path, multi30k: pathlib.Path) -> pathlib.Path:
    from keras_transformer.text.tokenizer import SubwordTokenizer

    files = [multi30k / "train.en", multi30k / "train.de"]
    return pathlib.Path(
        SubwordTokenizer.train(files, 8000, output_dir=folder / "build").save(folder / "tokenizer")
    )


def _run(runner, workers, corpus, tokenizer, output, num_shards) -> dict:
    args = [sys.executable, "-m", "keras_transformer.cli", "prepare", "--source", corpus[0]]
    args += ["--target", corpus[1], "--tokenizer", tokenizer]
    args += ["--num-shards", str(num_shards)] if num_shards else []  # 0: one per 200k pairs
    args += ["--workers", str(workers), "--output", output]
    args += ["--runner", "beam"] if runner == "beam" else ["--executor", "process"]
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    started = time.perf_counter()
    result, peaks = run_measured(list(map(str, args)), env=environment)
    wall = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(f"{runner} x{workers} failed:\n{result.stderr[-3000:]}")
    split = json.loads((output / "manifest.json").read_text())["splits"]["train"]
    return {
        "runner": "beam (FnApiRunner)" if runner == "beam" else "process pool",
        "workers": workers,
        "pairs": split["pairs"],
        "job_seconds": split["seconds"],
        "command_seconds": round(wall, 2),
        "job_pairs_per_s": round(split["pairs"] / split["seconds"]),
        "command_pairs_per_s": round(split["pairs"] / wall),
        "shard_bytes": sum(split["shard_bytes"]),
        "peak_rss_mib": max(p["peak_rss_mib"] for p in peaks),
        "processes": peaks,
    }


def _corpora(args, folder: pathlib.Path, multi30k: pathlib.Path):
    """``(name, (source, target))`` of each corpus to prepare."""
    if args.corpus:
        for path in map(pathlib.Path, args.corpus):
            yield path.name, (path / "train.en", path / "train.de")
        return
    for scale in map(int, args.scales.split(",")):
        yield f"multi30k train x{scale}", _corpus(folder, multi30k, scale)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("KT_DATA_DIR", "../shared/data"))
    parser.add_argument("--scales", default="1,10", help="corpus sizes, in copies of Multi30k")
    parser.add_argument("--corpus", action="append", help="a folder with train.en, train.de")
    parser.add_argument("--tokenizer", help="a tokenizer to use (default: one made on Multi30k)")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--runners", default="pool,beam")
    parser.add_argument("--num-shards", type=int, default=2, help="0: the default")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    multi30k = pathlib.Path(args.data_dir) / "multi30k"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp)
        tokenizer = args.tokenizer or _tokenizer(folder, multi30k)
        for name, corpus in _corpora(args, folder, multi30k):
            for runner in args.runners.split(","):
                for workers in map(int, args.workers.split(",")):
                    output = folder / f"out_{runner}_{workers}"
                    row = {"corpus": name}
                    row.update(_run(runner, workers, corpus, tokenizer, output, args.num_shards))
                    shutil.rmtree(output)
                    rows.append(row)
                    print(
                        f"{row['corpus']:22} {row['runner']:18} workers={workers}  "
                        f"{row['pairs']:8d} pairs  job {row['job_seconds']:7.1f} s "
                        f"({row['job_pairs_per_s']:6d} pairs/s)  command "
                        f"{row['command_seconds']:7.1f} s "
                        f"({row['command_pairs_per_s']:6d} pairs/s)  "
                        f"peak RSS {row['peak_rss_mib']:.0f} MiB",
                        flush=True,
                    )
                    if args.json:  # after every run: a long benchmark keeps what it measured
                        pathlib.Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
