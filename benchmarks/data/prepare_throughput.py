"""Sentence pairs per second of the prepare job: local process pool vs Beam's local runner.

Runs ``keras-transformer prepare`` in a fresh process for each setting: the pool
(``--executor process``) and Beam (``--runner beam``, FnApiRunner), each with 1 and 2 workers,
on Multi30k train and on a 10x concatenation of it (made in a temporary folder), with one
tokenizer trained beforehand (``--tokenizer``), 2 shards. Prints, per run, the pairs, the
seconds of the split's job (manifest ``seconds``: validation, chunking, pipeline, renames) and
of the whole command (TensorFlow start-up included), and pairs/s for both.

Usage::

    KT_DATA_DIR=../shared/data python -m benchmarks.data.prepare_throughput [--scales 1,10] \\
        [--workers 1,2] [--json results/prepare.json]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

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


def _run(runner: str, workers: int, corpus: tuple, tokenizer, output: pathlib.Path) -> dict:
    args = [sys.executable, "-m", "keras_transformer.cli", "prepare", "--source", corpus[0]]
    args += ["--target", corpus[1], "--tokenizer", tokenizer, "--num-shards", "2"]
    args += ["--workers", str(workers), "--output", output]
    args += ["--runner", "beam"] if runner == "beam" else ["--executor", "process"]
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    started = time.perf_counter()
    result = subprocess.run(
        list(map(str, args)), env=environment, capture_output=True, text=True, check=False
    )
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
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("KT_DATA_DIR", "../shared/data"))
    parser.add_argument("--scales", default="1,10", help="corpus sizes, in copies of Multi30k")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    multi30k = pathlib.Path(args.data_dir) / "multi30k"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = pathlib.Path(tmp)
        tokenizer = _tokenizer(folder, multi30k)
        for scale in map(int, args.scales.split(",")):
            corpus = _corpus(folder, multi30k, scale)
            for runner in ("pool", "beam"):
                for workers in map(int, args.workers.split(",")):
                    output = folder / f"out_{scale}_{runner}_{workers}"
                    row = {"corpus": f"multi30k train x{scale}"}
                    row.update(_run(runner, workers, corpus, tokenizer, output))
                    rows.append(row)
                    print(
                        f"{row['corpus']:22} {row['runner']:18} workers={workers}  "
                        f"{row['pairs']:7d} pairs  job {row['job_seconds']:7.1f} s "
                        f"({row['job_pairs_per_s']:6d} pairs/s)  command "
                        f"{row['command_seconds']:7.1f} s "
                        f"({row['command_pairs_per_s']:6d} pairs/s)",
                        flush=True,
                    )
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
