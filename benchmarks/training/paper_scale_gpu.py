# Paper section 5.1-5.2: "Each training batch contained a set of sentence pairs containing
# approximately 25000 source tokens and 25000 target tokens ... We trained our models on one
# machine with 8 NVIDIA P100 GPUs ... each training step took about 0.4 seconds. We trained the
# base models for a total of 100,000 steps or 12 hours."
"""The base model's training step at the paper's batch size, on a GPU: tokens/s, model FLOP
utilisation, and the hours 100k steps would take beside the paper's 12 hours on 8 P100s.

Usage::

    python -m benchmarks.training.paper_scale_gpu                      # on a GPU: both policies
    python -m benchmarks.training.paper_scale_gpu --policies mixed_bfloat16 --steps 50 \\
        --output gpu.json
    python -m benchmarks.training.paper_scale_gpu --smoke              # CPU: tiny model, 2 steps

What is timed: ``model.train_on_batch`` of ``build_transformer(TransformerConfig.base(37000))``
compiled by ``compile_model`` (Adam + warm-up schedule, label smoothing 0.1, the training metrics;
``mixed_float16`` gets Keras' loss scaling), on synthetic batches (random ids, no download, no
padding) of about ``--tokens-per-batch`` source and as many target tokens each, in a mix of
lengths (``--lengths``: one bucket shape each, batch = tokens // length), warmed up shape by
shape before timing. Each policy runs in its own subprocess (the dtype policy is global).

FLOPs per step (``benchmarks/throughput/flops.py``): 6 x the matmul parameters each position
touches x positions (forward 2 x multiply-accumulates, backward twice the forward; about
6 x params x tokens) plus the attention terms 6 x 2 d (S^2 + T^2 + T S) per sequence and layer;
embeddings, layer norms, softmax, the loss and the optimizer are not counted. MFU = FLOPs/s /
the dense fp16/bf16 tensor peak of the device, looked up by name (``PEAK_TFLOPS``).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = pathlib.Path(__file__).resolve().parents[2]

from benchmarks.training.throughput.flops import batch_stats, flop_model  # noqa: E402

# Dense (no sparsity) fp16 / bf16 tensor-core peaks in TFLOP/s from the vendors' data sheets,
# matched in this order against the device name TensorFlow reports (first match wins).
PEAK_TFLOPS = [
    ("B200", 2250.0),
    ("H200", 989.4),
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.4),  # SXM
    ("GH200", 989.4),
    ("A100", 312.0),
    ("A800", 312.0),
    ("L40S", 362.1),
    ("L4", 121.0),
    ("A10", 125.0),
    ("V100", 125.0),  # fp16 only: no bf16 tensor cores
    ("T4", 65.0),  # fp16 only
    ("P100", 21.2),  # fp16, no tensor cores: the paper's GPU
]
PAPER = {"gpus": 8, "device": "P100", "step_s": 0.4, "steps": 100_000, "hours": 12.0}
PAPER_TABLE2_FLOPS = 3.3e18  # Table 2, base model: training time x GPUs x 9.5 TFLOPS (P100)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="CPU check: tiny model, 2 steps")
    p.add_argument("--policies", default="mixed_float16,mixed_bfloat16")
    p.add_argument("--tokens-per-batch", type=int, default=25_000)
    p.add_argument("--lengths", default="16,32,48,64", help="sequence lengths of the mix")
    p.add_argument("--vocab-size", type=int, default=37_000, help="the paper's shared BPE")
    p.add_argument("--steps", type=int, default=30, help="timed steps per policy")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per shape first")
    p.add_argument(
        "--jit-compile",
        choices=("auto", "on", "off"),
        default="auto",
        help="XLA for the step (auto: on with a GPU, off on CPU)",
    )
    p.add_argument("--output", default=None, help="JSON file for the results")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.smoke:
        args.tokens_per_batch, args.lengths, args.vocab_size = 256, "8,16", 500
        args.steps, args.warmup = 2, 1
    return args


def device_peak(name: str) -> float | None:
    """The dense fp16/bf16 peak (TFLOP/s) of a device by its reported name, or None."""
    for key, peak in PEAK_TFLOPS:
        if key.lower() in name.lower():
            return peak
    return None


def synthetic_batches(args) -> list:
    """One batch per length: ``tokens_per_batch // length`` pairs of random ids (4..vocab), no
    padding, in the model's batch format (``{"source", "target"}``, labels)."""
    import numpy as np

    rng = np.random.default_rng(0)
    batches = []
    for length in (int(n) for n in args.lengths.split(",")):
        size = max(1, args.tokens_per_batch // length)
        source = rng.integers(4, args.vocab_size, (size, length), dtype=np.int32)
        labels = rng.integers(4, args.vocab_size, (size, length), dtype=np.int32)
        labels[:, -1] = 3  # EOS
        target = np.concatenate([np.full((size, 1), 2, np.int32), labels[:, :-1]], axis=1)
        batches.append(({"source": source, "target": target}, labels))
    return batches


def _device(tf) -> tuple[str, bool]:
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return "CPU", False
    details = tf.config.experimental.get_device_details(gpus[0])
    return details.get("device_name", "GPU"), True


def _build(args, policy: str, jit: bool):
    import keras

    from keras_transformer import TransformerConfig, build_transformer
    from keras_transformer.training import TrainingSettings, compile_model

    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy(policy)
    longest = max(int(n) for n in args.lengths.split(","))
    make = TransformerConfig.tiny if args.smoke else TransformerConfig.base
    config = make(vocab_size=args.vocab_size, max_positions=max(longest, 64))
    model = build_transformer(config)
    settings = TrainingSettings(mixed_precision=policy, jit_compile=jit, warmup_steps=4000)
    return compile_model(model, settings), config


def measure(args, policy: str) -> dict:
    """Times the step under ``policy`` in this process (see the module docstring)."""
    import tensorflow as tf

    name, on_gpu = _device(tf)
    jit = on_gpu if args.jit_compile == "auto" else args.jit_compile == "on"
    model, config = _build(args, policy, jit)
    batches = synthetic_batches(args)
    macs = flop_model(
        config.d_model, config.d_ff, config.num_layers, config.num_layers, config.target_vocab_size
    )
    stats = [batch_stats(inputs["source"], labels, macs) for inputs, labels in batches]
    compile_start = time.perf_counter()
    for inputs, labels in batches:
        for _ in range(args.warmup):
            model.train_on_batch(inputs, labels)
    compile_s = time.perf_counter() - compile_start
    times, flops, tokens = [], 0.0, 0
    for step in range(args.steps):
        (inputs, labels), stat = batches[step % len(batches)], stats[step % len(batches)]
        start = time.perf_counter()
        model.train_on_batch(inputs, labels)  # returns numpy: the step has finished
        times.append(time.perf_counter() - start)
        flops += stat["executed_flops"]
        tokens += stat["src_tokens"] + stat["tgt_tokens"]
    seconds = sum(times)
    return {
        "policy": policy,
        "device": name,
        "jit_compile": jit,
        "params": int(model.count_params()),
        "steps": args.steps,
        "step_s_mean": seconds / args.steps,
        "tokens_per_batch": tokens / args.steps,
        "tokens_per_s": tokens / seconds,
        "tflops_per_s": flops / seconds / 1e12,
        "flops_per_step": flops / args.steps,
        "warmup_compile_s": compile_s,
        "peak_tflops": device_peak(name) if on_gpu else None,
    }


def _run_child(policy: str, argv: list[str]) -> dict:
    command = [
        sys.executable,
        "-m",
        "benchmarks.training.paper_scale_gpu",
        *argv,
        "--child",
        policy,
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode or not lines:
        return {"policy": policy, "error": (result.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(lines[-1])


def report(results: list[dict]) -> list[str]:
    """The printed table: tokens/s, MFU, and 100k steps in hours beside the paper's."""
    lines = [
        "FLOPs/step: 6 x matmul params x positions + attention 6 x 2d(S^2+T^2+TS) per sequence "
        "and layer (benchmarks/throughput/flops.py); MFU against the device's dense fp16/bf16 "
        "peak.",
        f"{'policy':<16}{'device':<22}{'XLA':<5}{'src+tgt/b':>10}{'s/step':>9}"
        f"{'src+tgt/s':>12}{'TFLOP/s':>9}{'MFU':>7}{'100k steps':>12}",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"{r['policy']:<16}failed: {r['error']}")
            continue
        mfu = f"{r['tflops_per_s'] / r['peak_tflops']:.1%}" if r["peak_tflops"] else "n/a"
        hours = r["step_s_mean"] * PAPER["steps"] / 3600
        lines.append(
            f"{r['policy']:<16}{r['device'][:21]:<22}{'on' if r['jit_compile'] else 'off':<5}"
            f"{r['tokens_per_batch']:>10.0f}{r['step_s_mean']:>9.3f}{r['tokens_per_s']:>12,.0f}"
            f"{r['tflops_per_s']:>9.1f}{mfu:>7}{hours:>10.1f} h"
        )
    done = [r for r in results if "error" not in r]
    if done:
        flops_100k = done[0]["flops_per_step"] * PAPER["steps"]
        per_p100 = done[0]["flops_per_step"] / PAPER["step_s"] / PAPER["gpus"] / 1e12
        lines.append(
            f"Paper: {PAPER['step_s']} s/step, {PAPER['steps']:,} steps = {PAPER['hours']:g} h on "
            f"{PAPER['gpus']} {PAPER['device']}s; one GPU here at the rows above. Our FLOP model "
            f"for 100k such steps: {flops_100k:.2e} FLOPs (Table 2 counts {PAPER_TABLE2_FLOPS:.1e}"
            " for the base model: time x GPUs x an assumed sustained rate); at the paper's "
            f"{PAPER['step_s']} s/step that is {per_p100:.1f} TFLOP/s per P100 (fp32 peak ~10)."
        )
    return lines


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if args.child:
        print(json.dumps(measure(args, args.child)), flush=True)
        return 0
    results = []
    for policy in args.policies.split(","):
        print(f"timing {policy} ...", flush=True)
        results.append(_run_child(policy, argv))
    print("\n".join(report(results)))
    if args.output:
        pathlib.Path(args.output).write_text(json.dumps(results, indent=2) + "\n")
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
