"""What one subprocess does: ``prepare`` (tokenizers, epoch statistics) or one ``measure``."""

from __future__ import annotations

import argparse
import os
import time

from benchmarks.training.throughput.batches import epoch_stats, take_batches
from benchmarks.training.throughput.flops import batch_stats, flop_model, summarize
from benchmarks.training.throughput.settings import D_FF, D_MODEL, NUM_LAYERS, SETTINGS
from benchmarks.training.throughput.timing import matmul_peaks, peak_rss_kib, rss_kib, time_steps
from benchmarks.training.throughput.tokenizers import prepare_tokenizers


def child_prepare(spec: dict) -> dict:
    """Trains or finds the tokenizers and counts one epoch of each pipeline."""
    args = argparse.Namespace(**spec["args"])
    import tensorflow as tf

    start = time.perf_counter()
    out = {"tokenizers": prepare_tokenizers(args)}
    out["epoch"] = epoch_stats(args)
    out["seconds"] = time.perf_counter() - start
    out["tf_version"] = tf.__version__
    out["onednn"] = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on for x86 Linux)")
    return out


def _build(system, data_info, args, jit):
    if system == "ours":
        from benchmarks.training.throughput.ours import build_ours

        return build_ours(data_info["source_vocab"], jit)
    from benchmarks.training.throughput.baseline import build_baseline

    return build_baseline(
        data_info["source_vocab"], data_info["target_vocab"], jit, args.baseline_optimizer
    )


def child_measure(spec: dict) -> dict:
    """Times ``train_on_batch`` of one system in one setting (see the script's docstring)."""
    args = argparse.Namespace(**spec["args"])
    setting, system = spec["setting"], spec["system"]
    policy, jit = SETTINGS[setting]
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(args.seed)
    keras.mixed_precision.set_global_policy(policy or "float32")
    print(
        f"[{setting} / {system}] TF {tf.__version__}, Keras {keras.__version__}, "
        f"policy {keras.mixed_precision.global_policy().name}, jit_compile={jit}",
        flush=True,
    )
    peaks = [matmul_peaks(args.matmul_size, args.matmul_reps)]
    batches, data_info = take_batches(system, args, args.warmup + args.steps)
    rss_before_model = rss_kib()
    model = _build(system, data_info, args, jit)
    macs = flop_model(D_MODEL, D_FF, NUM_LAYERS, NUM_LAYERS, data_info["target_vocab"])
    stats = [batch_stats(b[2], b[3], macs) for b in batches[args.warmup :]]
    print(
        f"[{setting} / {system}] {model.count_params():,} parameters; {len(batches)} batches "
        f"(first shapes {[s['shape'] for s in stats[:3]]})",
        flush=True,
    )

    def step(batch):
        model.train_on_batch(batch[0], batch[1])

    start = time.perf_counter()
    timing = time_steps(step, batches, args.warmup, jit, label=f"{setting}/{system}")
    wall = time.perf_counter() - start
    peak_rss = peak_rss_kib()
    peaks.append(matmul_peaks(args.matmul_size, args.matmul_reps))
    measured = {"timing": timing, "wall": wall, "peaks": peaks, "stats": stats, "macs": macs}
    memory = {"rss_before_model": rss_before_model, "peak_rss": peak_rss}
    result = _result(spec, args, model, data_info, measured, memory)
    if system == "ours" and setting in args.profile:
        from benchmarks.training.throughput.profile import profile_ours

        pbatches = batches[: args.warmup + max(2, min(args.steps, args.profile_steps))]
        result["profile_ms"] = profile_ours(model, pbatches, args.warmup, jit, macs)
        result["args_profile_steps"] = len(pbatches) - args.warmup
    return result


def _result(spec, args, model, data_info, measured, memory) -> dict:
    """The JSON record of one measurement."""
    setting, system = spec["setting"], spec["system"]
    policy, jit = SETTINGS[setting]
    timing, stats, peaks = measured["timing"], measured["stats"], measured["peaks"]
    dtype = "bfloat16" if policy == "mixed_bfloat16" else "float32"
    candidates = [p.get(k) for p in peaks for k in (dtype, f"{dtype}_jit")]
    peak = max([c for c in candidates if c] or [0.0])
    return {
        "setting": setting,
        "system": system,
        "policy": policy or "float32",
        "jit_compile": jit,
        "tokenizer": data_info["tokenizer"],
        "optimizer": "adam + schedule" if system == "ours" else args.baseline_optimizer,
        "source_vocab": data_info["source_vocab"],
        "target_vocab": data_info["target_vocab"],
        "params": int(model.count_params()),
        "flop_model_macs": measured["macs"],
        "matmul_peaks_gflops": peaks,
        "peak_gflops": peak,
        "peak_dtype": dtype,
        "warmup_steps": args.warmup,
        "warmup_s": timing["warmup_s"],
        "compile_pass_s": timing["compile_pass_s"],
        "compile_pass_steps": timing["compile_pass_steps"],
        "distinct_timed_shapes": len({tuple(s["shape"]) for s in stats}),
        "wall_s": measured["wall"],
        "rss_before_model_mib": memory["rss_before_model"] / 1024,
        "peak_rss_mib": memory["peak_rss"] / 1024,
        **summarize(timing["step_times"], stats, peak),
    }
