"""Training from a large prepared corpus: the input pipeline against the model, and the restart.

On a folder of ``keras-transformer prepare`` shards (e.g. the WMT14-sized corpus of
``benchmarks.data.synthetic_corpus``), each measurement in a fresh process (its peak RSS polled
from ``/proc``):

* ``pipeline``: the training stream exactly as ``train`` builds it (``training/inputs.py``:
  ``training_stream`` over the shards, default shuffle buffer 16,384): seconds from building it
  to its first batch, then pairs/s and real tokens/s (source + target, EOS/BOS included) over
  ``--batches`` batches.
* ``model``: what the model consumes: ``train_on_batch`` of the ``--presets`` (``compile_model``
  as training compiles, fp32) on batches taken from that stream beforehand, pairs/s and real
  tokens/s after warm-up and one step per batch shape (``benchmarks.training.throughput``'s
  timing).
* ``resume``: the ``train`` command itself on the shards (``--resume-preset``, fp32, a backup
  every 25 batches): started fresh, SIGKILLed with its process group once a backup of at least
  ``--kill-after`` batches exists, started again; for each start the "First step ... after the
  start" the command prints (data, model, tracing).
* ``restart``: what a resumed run pays before its first step: seconds from building the stream
  that starts at batch ``b`` to that batch, for ``b`` at the given positions in passes over the
  corpus; ``segments`` is ``train``'s input (``train_input(skip=b)``: the shards in parts of
  about a million pairs, the segment found from the manifest's ``kept_by_length``),
  ``one-part`` the stream of whole passes counted by reading the shards (before parts, and for
  shards of an older prepare), ``replay`` the stream the code had before segments:
  ``make_dataset(repeat=True).skip(b)``, which reads and shuffles every batch before ``b``
  again.

Usage::

    python -m benchmarks.data.scale_training --shards /tmp/wmt_like/shards_x1 \\
        --presets small,base,big --positions 0,0.5,1.5,3.5 --json results/scale_training.json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time

from benchmarks.process_memory import run_measured

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def _pairs_and_tokenizer(shards: pathlib.Path):
    from keras_transformer import data
    from keras_transformer.text.tokenizer import SubwordTokenizer

    manifest = json.loads((shards / "manifest.json").read_text())
    pairs = data.read_tfrecord_shards(shards, "train")
    return pairs, SubwordTokenizer.load(shards / "tokenizer"), manifest["splits"]["train"]


def _stream(args, skip: int = 0, method: str = "segments"):
    from keras_transformer import data
    from keras_transformer.training.inputs import train_input
    from keras_transformer.training.run_config import DataSettings

    pairs, tokenizer, split = _pairs_and_tokenizer(pathlib.Path(args.shards))
    budget = dict(
        tokens_per_batch=args.tokens_per_batch, max_sentence_length=args.max_sentence_length
    )
    if method == "segments":  # as train reads the shards: parts, counted from the manifest
        settings = DataSettings(shards=str(args.shards), shuffle_seed=0, **budget)
        return train_input(settings, tokenizer, skip=skip)
    if method == "one-part":  # the stream before parts: whole passes, counted by reading
        return data.training_stream(
            pairs, tokenizer, corpus_pairs=split["kept"], seed=0, skip=skip, **budget
        )
    stream = data.make_dataset(pairs, tokenizer, seed=0, repeat=True, **budget)
    return stream.skip(skip)  # "replay": the stream before segments


def _real_tokens(inputs, labels) -> tuple:
    source = int((inputs["source"].numpy() != 0).sum())
    target = int((labels.numpy() != 0).sum())
    return int(labels.shape[0]), source + target


def child_pipeline(args) -> dict:
    started = time.perf_counter()
    iterator = iter(_stream(args))
    next(iterator)
    first = time.perf_counter() - started
    pairs = tokens = 0
    started = time.perf_counter()
    for _ in range(args.batches):
        batch_pairs, batch_tokens = _real_tokens(*next(iterator))
        pairs, tokens = pairs + batch_pairs, tokens + batch_tokens
    seconds = time.perf_counter() - started
    return {
        "first_batch_seconds": round(first, 2),
        "batches": args.batches,
        "pairs_per_s": round(pairs / seconds),
        "tokens_per_s": round(tokens / seconds),
        "tokens_per_pair": round(tokens / pairs, 1),
    }


def child_model(args) -> dict:
    import keras

    from benchmarks.training.throughput.timing import time_steps
    from keras_transformer import TransformerConfig, build_transformer
    from keras_transformer.training import TrainingSettings, compile_model

    keras.utils.set_random_seed(0)
    # time_steps' batch format: (inputs, labels, source ids, label ids)
    batches = [
        (inputs, labels, inputs["source"].numpy(), labels.numpy())
        for inputs, labels in _stream(args).take(args.warmup + args.steps)
    ]
    vocab = _pairs_and_tokenizer(pathlib.Path(args.shards))[1].vocab_size
    config = TransformerConfig.preset(args.preset, vocab, max_positions=args.max_sentence_length)
    model = build_transformer(config)
    compile_model(model, TrainingSettings())
    timing = time_steps(lambda b: model.train_on_batch(b[0], b[1]), batches, args.warmup, False)
    timed = batches[args.warmup :]
    pairs = sum(_real_tokens(*b[:2])[0] for b in timed)
    tokens = sum(_real_tokens(*b[:2])[1] for b in timed)
    seconds = sum(timing["step_times"])
    return {
        "preset": args.preset,
        "parameters": int(model.count_params()),
        "steps": len(timed),
        "seconds_per_step": round(seconds / len(timed), 3),
        "pairs_per_s": round(pairs / seconds),
        "tokens_per_s": round(tokens / seconds),
    }


def child_restart(args) -> dict:
    from keras_transformer.data import segments

    pairs, tokenizer, split = _pairs_and_tokenizer(pathlib.Path(args.shards))
    budget = dict(
        passes=1,
        tokens_per_batch=args.tokens_per_batch,
        max_sentence_length=args.max_sentence_length,
    )
    counted = time.perf_counter()
    if args.batches_per_pass:
        per_pass = args.batches_per_pass
    elif split.get("kept_by_length"):
        per_pass = segments.batches_by_length(
            segments.add_length_counts(*split["kept_by_length"]), **budget
        )
    else:
        per_pass = segments.segment_batches(pairs, tokenizer, **budget)
    count_seconds = time.perf_counter() - counted  # to find the skip: not part of the restart
    skip = round(args.position * per_pass)
    started = time.perf_counter()
    next(iter(_stream(args, skip, args.method)))
    return {
        "method": args.method,
        "position_passes": args.position,
        "batches_per_pass": per_pass,
        "skip": skip,
        "first_batch_seconds": round(time.perf_counter() - started, 2),
        "benchmark_count_seconds": round(count_seconds, 2),
    }


RESUME_CONFIG = """\
model: {{preset: {preset}}}
data: {{shards: {shards}, tokens_per_batch: {tokens}, max_sentence_length: {length}}}
training: {{max_steps: 1000000, steps_per_epoch: 50, backup_every_steps: 25, keep_checkpoints: 2}}
"""
FIRST_STEP = re.compile(r"First step \(update (\d+)\) ([0-9.]+) s after the start")


def _train_command(config: pathlib.Path, run_dir: pathlib.Path) -> list:
    return [sys.executable, "-m", "keras_transformer.cli", "train", "--config", str(config),
            "--run", str(run_dir)]  # fmt: skip


def _first_step(output: str) -> dict:
    found = FIRST_STEP.search(output)
    if not found:
        raise SystemExit(f"no first step in the output:\n{output[-3000:]}")
    return {"first_update": int(found.group(1)), "first_step_seconds": float(found.group(2))}


def _start_and_kill(command, environment, run_dir: pathlib.Path, kill_after: int) -> dict:
    """Start ``train``; SIGKILL its process group once a backup of >= ``kill_after`` batches."""
    log = run_dir.parent / "first.log"
    with open(log, "w") as output:
        process = subprocess.Popen(command, env=environment, stdout=output,
                                   stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        while True:
            backups = [int(p.name.split("-")[1]) for p in run_dir.glob("backup/batch-*")]
            if backups and max(backups) >= kill_after:
                break
            if process.poll() is not None:
                raise SystemExit(f"train ended before the kill:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    return {"killed_after_backup": max(backups), **_first_step(log.read_text())}


def resume(args) -> list:
    """The ``train`` command started, killed, started again (see the module docstring)."""
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    with tempfile.TemporaryDirectory(prefix="kt-scale-resume-") as folder:
        folder = pathlib.Path(folder)
        config = folder / "config.yaml"
        config.write_text(RESUME_CONFIG.format(
            preset=args.resume_preset, shards=pathlib.Path(args.shards).resolve(),
            tokens=args.tokens_per_batch, length=args.max_sentence_length))  # fmt: skip
        run_dir = folder / "run"
        command = _train_command(config, run_dir)
        first = _start_and_kill(command, environment, run_dir, args.kill_after)
        again = _start_and_kill(command, environment, run_dir, first["killed_after_backup"] + 25)
    return [
        {"mode": "resume", "start": "fresh", **first},
        {"mode": "resume", "start": "after kill -9", **again},
    ]


CHILDREN = {"pipeline": child_pipeline, "model": child_model, "restart": child_restart}


def _child(args, mode: str, **extra) -> dict:
    command = [sys.executable, "-m", "benchmarks.data.scale_training", "--child", mode]
    for name, value in {**vars(args), **extra}.items():
        skipped = ("child", "json", "presets", "positions", "methods", "modes")
        if name not in skipped and value is not None:
            command += [f"--{name.replace('_', '-')}", str(value)]
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    result, peaks = run_measured(command, env=environment, cwd=REPO_ROOT)
    if result.returncode:
        raise SystemExit(f"{mode} {extra} failed:\n{result.stderr[-3000:]}")
    row = json.loads(result.stdout.strip().splitlines()[-1])
    return {"mode": mode, **row, "peak_rss_mib": max(p["peak_rss_mib"] for p in peaks)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", required=True, help="a prepared folder (manifest.json)")
    parser.add_argument("--tokens-per-batch", type=int, default=4096)
    parser.add_argument("--max-sentence-length", type=int, default=256)
    parser.add_argument("--batches", type=int, default=300, help="pipeline: batches timed")
    parser.add_argument("--presets", default="small,base,big")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--positions", default="0,0.5,1.5,3.5", help="restart: in passes")
    parser.add_argument("--methods", default="segments,one-part,replay")
    parser.add_argument("--replay-max-passes", type=float, default=1.5)
    parser.add_argument(
        "--batches-per-pass", type=int, help="restart: known from an earlier run (else counted)"
    )
    parser.add_argument("--resume-preset", default="small")
    parser.add_argument("--kill-after", type=int, default=50, help="resume: batches")
    parser.add_argument("--modes", default="pipeline,model,resume,restart")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--preset", help=argparse.SUPPRESS)
    parser.add_argument("--position", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(CHILDREN[args.child](args)), flush=True)
        return 0
    rows = []

    def keep(row):
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")

    modes = args.modes.split(",")
    if "pipeline" in modes:
        keep(_child(args, "pipeline"))
    for preset in filter(None, args.presets.split(",") if "model" in modes else []):
        keep(_child(args, "model", preset=preset))
    for row in resume(args) if "resume" in modes else []:
        keep(row)
    for position in map(float, args.positions.split(",") if "restart" in modes else []):
        for method in args.methods.split(","):
            if method == "replay" and position > args.replay_max_passes:
                continue  # its cost grows with the position: measured up to this one
            keep(_child(args, "restart", position=position, method=method))
    return 0


if __name__ == "__main__":
    sys.exit(main())
