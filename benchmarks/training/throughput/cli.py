"""The command line, and the parent process: one subprocess per (setting, system), one report."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from benchmarks.training.throughput.report import compute_ratios, print_report
from benchmarks.training.throughput.settings import (
    REPO,
    SCRIPT,
    SETTINGS,
    SYSTEMS,
    recipe_vocab_size,
)
from keras_transformer.machine import cpu_description

CHILD_ARGS = (
    "data_dir",
    "steps",
    "warmup",
    "baseline_tokenizer",
    "baseline_optimizer",
    "baseline_batch",
    "profile_steps",
    "matmul_size",
    "matmul_reps",
    "seed",
    "cache_dir",
    "vocab_size",
)


def build_parser(description) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    add = parser.add_argument
    add("--data-dir", default=os.environ.get("KT_DATA_DIR", str(REPO.parent / "shared" / "data")))
    add("--steps", type=int, default=30, help="timed steps per (setting, system)")
    add("--warmup", type=int, default=3, help="untimed steps first")
    add("--settings", default=",".join(SETTINGS), help=f"comma list of {list(SETTINGS)}")
    add("--systems", default=",".join(SYSTEMS), help="comma list of ours,baseline")
    add("--baseline-tokenizer", choices=("wordpiece", "sentencepiece"), default="wordpiece")
    add(
        "--baseline-optimizer",
        default="rmsprop",
        help="the recipe's rmsprop (default); e.g. adam to check the rmsprop+XLA "
        "slowdown of the baseline's jit_compile step",
    )
    add(
        "--profile",
        default="fp32",
        help="settings in which our step is also profiled (comma list, or none)",
    )
    add(
        "--baseline-batch",
        default="64",
        help="the baseline's pairs per step: the recipe's 64, or 'tokens': as many as fill our "
        "per-step token budget once padded to 40 (102)",
    )
    add("--profile-steps", type=int, default=10)
    add("--matmul-size", type=int, default=2048)
    add("--matmul-reps", type=int, default=5)
    add(
        "--vocab-size",
        type=int,
        default=None,
        help="our shared BPE vocabulary (default: data.vocab_size of "
        "configs/multi30k.yaml, the BLEU recipe's)",
    )
    add("--seed", type=int, default=1)
    add(
        "--cache-dir",
        default=os.path.join(tempfile.gettempdir(), "kt_train_throughput"),
        help="trained tokenizers are kept here between runs",
    )
    add("--timeout", type=int, default=3600, help="seconds per subprocess")
    add(
        "--quick",
        action="store_true",
        help="smoke test: 3 timed steps, 1 warm-up, small matmul, profile 2 steps",
    )
    add("--output", help="also write everything as JSON here")
    add("--child", choices=("prepare", "measure"), help=argparse.SUPPRESS)
    add("--child-spec", help=argparse.SUPPRESS)
    add("--child-output", help=argparse.SUPPRESS)
    return parser


def _resolve(parser, args):
    """Applies ``--quick`` and the defaults; returns ``(settings, systems, profile)``."""
    if args.vocab_size is None:
        args.vocab_size = recipe_vocab_size()
    if args.quick:
        args.steps, args.warmup = 3, 1
        args.matmul_size, args.matmul_reps, args.profile_steps = 1024, 3, 2
    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    for name in settings:
        if name not in SETTINGS:
            parser.error(f"unknown setting {name!r}; choose from {list(SETTINGS)}")
    for name in systems:
        if name not in SYSTEMS:
            parser.error(f"unknown system {name!r}; choose from {list(SYSTEMS)}")
    if args.baseline_batch != "tokens" and not args.baseline_batch.isdigit():
        parser.error(f"--baseline-batch {args.baseline_batch!r}: a number of pairs or 'tokens'")
    if args.steps < 1 or args.warmup < 1:
        parser.error("--steps and --warmup must be >= 1")
    profile = [] if args.profile in ("", "none") else [s.strip() for s in args.profile.split(",")]
    if not (pathlib.Path(args.data_dir) / "multi30k" / "train.en").exists():
        parser.error(f"{args.data_dir}/multi30k/train.en not found (set --data-dir or KT_DATA_DIR)")
    return settings, systems, profile


def main(argv=None, description=None):
    parser = build_parser(description)
    args = parser.parse_args(argv)
    if args.child:
        _run_as_child(args)
        return
    settings, systems, profile = _resolve(parser, args)
    child_args = {k: getattr(args, k) for k in CHILD_ARGS}
    child_args["profile"] = profile
    report = {
        "cpu": _cpu_info(),
        "args": {**child_args, "settings": settings, "systems": systems},
        "quick": args.quick,
        "python": sys.version.split()[0],
        "runs": [],
    }
    print(f"preparing tokenizers and epoch statistics (cache {args.cache_dir}) ...", flush=True)
    report["prepare"] = run_child("prepare", {"args": child_args}, args.timeout)
    if "error" in report["prepare"]:
        print(f"prepare failed: {report['prepare']['error']}")
        sys.exit(1)
    for setting in settings:
        for system in systems:
            print(f"--- {setting} / {system}", flush=True)
            spec = {"args": child_args, "setting": setting, "system": system}
            result = run_child("measure", spec, args.timeout)
            result.setdefault("setting", setting)
            result.setdefault("system", system)
            report["runs"].append(result)
    report["ratios"], report["targets"] = compute_ratios(report["runs"])
    print_report(report)
    if args.output:
        pathlib.Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.output}")


def _run_as_child(args):
    from benchmarks.training.throughput.child import child_measure, child_prepare

    spec = json.loads(args.child_spec)
    result = child_prepare(spec) if args.child == "prepare" else child_measure(spec)
    pathlib.Path(args.child_output).write_text(json.dumps(result))


def run_child(kind, spec, timeout):
    """Runs ``train_throughput.py --child kind`` in a fresh interpreter; its JSON result."""
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as handle:
        path = handle.name
    command = [
        sys.executable,
        "-m",
        SCRIPT,
        "--child",
        kind,
        "--child-spec",
        json.dumps(spec),
        "--child-output",
        path,
    ]
    start = time.perf_counter()
    try:
        proc = subprocess.run(command, timeout=timeout)
        text = pathlib.Path(path).read_text()
        if proc.returncode or not text:
            return {"error": f"child exited with status {proc.returncode}"}
        return json.loads(text)
    except subprocess.TimeoutExpired:
        return {"error": f"child timed out after {timeout} s"}
    finally:
        print(f"  ({kind} child: {time.perf_counter() - start:.0f} s)", flush=True)
        try:
            os.unlink(path)
        except OSError:
            pass


def _cpu_info() -> dict:
    info = cpu_description()
    try:
        info["loadavg_at_start"] = os.getloadavg()
    except OSError:
        pass
    return info
