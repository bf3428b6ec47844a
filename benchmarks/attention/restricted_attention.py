"""Full against local restricted self-attention (paper section 4): time and memory against n.

For one ``MultiHeadAttention`` layer (self-attention, no mask) and one ``EncoderBlock`` (attention,
feed-forward, two layer norms), batch 1, at sequence lengths n = 128 ... 16384, this measures
forward plus backward (gradients of a fixed linear function of the output with respect to the
input and every weight, one ``tf.function``, no XLA), for full attention and for restricted
attention with r = 32 and r = 128 (the blocked O(n r d) form, ``blocked=True``).

* Time: the median of repeated calls after one warm-up call (which traces), at least
  ``--repeats`` calls and ``--min-seconds`` of them.
* Peak memory: every point runs in a fresh subprocess; ``ru_maxrss`` (the process's high-water
  resident set) minus the resident set just before the first call (TensorFlow, the layer and the
  inputs) is the memory the calls needed. ``tracemalloc`` does not see TensorFlow's allocator,
  and ``tf.config.experimental.get_memory_info`` does not work on CPU.
* Full attention holds several ``[heads, n, n]`` float32 tensors; points whose estimate
  (4 of them) exceeds ``--full-memory-gib`` are skipped and reported as such.

Printed: a markdown table per unit, the crossover n (the smallest n from which restricted is
faster, and from which it uses less memory), and the log-log slope of time against n over
n >= ``--fit-from``, beside the paper's per-layer costs: O(n^2 d) for self-attention, O(r n d)
restricted (Table 1), i.e. exponents 2 and 1.

    python -m benchmarks.attention.restricted_attention                      # ~10-20 min on 2 cores
    python -m benchmarks.attention.restricted_attention --lengths 128,256 --repeats 1   # smoke test

``--vary r`` or ``--vary d`` holds n (``--n``) and measures against the window r (``--windows``,
at ``--d-model``) or the model width d (``--d-models``, at the first of ``--windows``), full
attention beside each d: the paper's O(r n d) says exponent 1 in r and in d, O(n^2 d) 1 in d.

    python -m benchmarks.attention.restricted_attention --vary r --n 4096 \
        --windows 16,32,64,128,256,512 --output results/restricted_attention_r.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import resource
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
LENGTHS = [2**k for k in range(7, 15)]  # 128 ... 16384


def _rss_kib():
    """The current resident set of this process, KiB (Linux ``/proc``)."""
    pages = int(pathlib.Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") // 1024


def _unit(name, d_model, heads, window):
    """The layer to measure, built: ``attention`` or ``block``."""
    from keras_transformer.layers import EncoderBlock, MultiHeadAttention

    shape = (1, None, d_model)
    if name == "attention":
        layer = MultiHeadAttention(heads, attention_window=window, blocked=True)
        layer.build(shape, shape)
        return layer, lambda x: layer(x, x)
    block = EncoderBlock(heads, 4 * d_model, dropout=0.0, attention_window=window)
    block.build(shape)
    return block, lambda x: block(x)


def measure_point(unit, window, length, d_model, heads, repeats, min_seconds):
    """One point, in this process: ``{"seconds", "peak_mib", "baseline_mib"}``."""
    import numpy as np
    import tensorflow as tf

    layer, forward = _unit(unit, d_model, heads, window)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(1, length, d_model)), tf.float32)
    probe = tf.constant(rng.normal(size=(1, length, d_model)), tf.float32)

    @tf.function(autograph=False, jit_compile=False)
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(forward(x) * probe)
        grads = tape.gradient(loss, [x, *layer.trainable_weights])
        return loss, tf.add_n([tf.reduce_sum(g) for g in grads])

    baseline = _rss_kib()
    step(x)[1].numpy()  # warm-up: traces and runs once
    times = []
    while len(times) < repeats or sum(times) < min_seconds:
        start = time.perf_counter()
        step(x)[1].numpy()
        times.append(time.perf_counter() - start)
        if len(times) >= 50:
            break
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "seconds": float(np.median(times)),
        "calls": len(times),
        "peak_mib": (peak - baseline) / 1024,
        "baseline_mib": baseline / 1024,
    }


def _full_estimate_gib(length, heads):
    return 4 * heads * length * length * 4 / 2**30


def run_point(args, unit, window, length, d_model=None):
    """A point in a fresh subprocess (at ``d_model``, default ``--d-model``); a dict, with
    ``error`` if it failed or was skipped."""
    if window is None and _full_estimate_gib(length, args.heads) > args.full_memory_gib:
        return {"error": f"skipped: est. {_full_estimate_gib(length, args.heads):.0f} GiB"}
    command = [
        sys.executable,
        "-m",
        "benchmarks.attention.restricted_attention",
        "--point",
        json.dumps([unit, window, length]),
        "--d-model",
        str(d_model or args.d_model),
        "--heads",
        str(args.heads),
        "--repeats",
        str(args.repeats),
        "--min-seconds",
        str(args.min_seconds),
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=1800, cwd=REPO
    )
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["killed"])[-1]
        return {"error": f"failed (exit {result.returncode}): {tail[:80]}"}
    return json.loads(result.stdout.strip().splitlines()[-1])


def slope(points):
    """Least-squares slope of log(value) against log(n): ``[(n, value), ...]`` -> float."""
    if len(points) < 2:
        return float("nan")
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(v) for _, v in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def crossover(full, restricted, key):
    """The smallest n from which ``restricted[key] < full[key]`` at every measured larger n
    (full points that were skipped count as restricted winning); None if never."""
    lengths = sorted(restricted)
    for i, n in enumerate(lengths):
        if all(
            "error" not in restricted[m]
            and ("error" in full.get(m, {"error": 1}) or restricted[m][key] < full[m][key])
            for m in lengths[i:]
        ):
            return n
    return None


def _cell(point, key, scale=1.0, digits=1):
    if "error" in point:
        return point["error"].split(":")[0]
    return f"{point[key] * scale:.{digits}f}"


def report(results, args):
    """Markdown tables, crossovers and slopes of ``results[unit][mode][n]``."""
    lines = []
    for unit, modes in results.items():
        names = list(modes)
        lines += [f"\n### {unit} (d_model {args.d_model}, {args.heads} heads, batch 1)\n"]
        header = ["n"] + [f"{m} ms" for m in names] + [f"{m} MiB" for m in names]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for n in args.lengths:
            cells = [_cell(modes[m][n], "seconds", 1e3) for m in names]
            cells += [_cell(modes[m][n], "peak_mib", 1.0, 0) for m in names]
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        lines.append("")
        full = modes["full"]
        for mode in names:
            fits = [
                slope(
                    [
                        (n, p[key])
                        for n, p in modes[mode].items()
                        if "error" not in p and n >= args.fit_from
                    ]
                )
                for key in ("seconds", "peak_mib")
            ]
            paper = "2 (O(n^2 d))" if mode == "full" else "1 (O(r n d))"
            text = f"- {mode}: exponents over n >= {args.fit_from}: time {fits[0]:.2f}, "
            text += f"memory {fits[1]:.2f} (paper's time: {paper})"
            if mode != "full":
                cross_t = crossover(full, modes[mode], "seconds")
                cross_m = crossover(full, modes[mode], "peak_mib")
                text += f"; faster than full from n = {cross_t}, less memory from n = {cross_m}"
            lines.append(text)
    return "\n".join(lines)


def sweep(args) -> dict:
    """Points at a fixed n against r (``vary == "r"``) or d (``"d"``), for each unit:
    ``{unit: [{"r", "d", "mode", **point}, ...]}``."""
    windows = [int(r) for r in args.windows.split(",")]
    results = {}
    for unit in args.units.split(","):
        rows = results[unit] = []
        if args.vary == "r":
            settings = [("full", None, args.d_model)]
            settings += [(f"r={r}", r, args.d_model) for r in windows]
        else:
            settings = []
            for d in args.d_models:
                settings += [("full", None, d), (f"r={windows[0]}", windows[0], d)]
        for mode, window, d in settings:
            point = run_point(args, unit, window, args.n, d_model=d)
            rows.append({"mode": mode, "r": window, "d": d, **point})
            print(f"{unit} {mode} d={d} n={args.n}: {json.dumps(point)}", flush=True)
    return results


def sweep_report(results, vary, n) -> str:
    """Markdown tables of a :func:`sweep`, with the log-log slope of the restricted points'
    time and memory against ``vary`` (and of full attention's against d)."""
    lines = []
    for unit, rows in results.items():
        lines += [f"\n### {unit}, n = {n}, against {vary}\n"]
        lines += ["| mode | r | d | ms | MiB |", "|---|---|---|---|---|"]
        for row in rows:
            ms, mib = _cell(row, "seconds", 1e3), _cell(row, "peak_mib", 1.0, 0)
            lines.append(f"| {row['mode']} | {row['r'] or '-'} | {row['d']} | {ms} | {mib} |")
        lines.append("")
        groups = {"restricted": [r for r in rows if r["r"]]}
        if vary == "d":
            groups["full"] = [r for r in rows if not r["r"]]
        for name, group in groups.items():
            fits = [
                slope([(r[vary], r[key]) for r in group if "error" not in r])
                for key in ("seconds", "peak_mib")
            ]
            lines.append(
                f"- {name}: exponents against {vary}: time {fits[0]:.2f}, memory {fits[1]:.2f} "
                "(the paper's time: 1)"
            )
    return "\n".join(lines)


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    p.add_argument("--windows", default="32,128", help="r values of the restricted runs")
    p.add_argument("--units", default="attention,block")
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--min-seconds", type=float, default=1.0)
    p.add_argument("--full-memory-gib", type=float, default=8.0)
    p.add_argument("--fit-from", type=int, default=1024)
    p.add_argument("--output", help="also write the raw results as JSON here")
    p.add_argument("--report", help="print the tables of a JSON written by --output; no runs")
    p.add_argument("--vary", choices=("r", "d"), help="hold n (--n), vary r or d")
    p.add_argument("--n", type=int, default=4096, help="the sequence length of --vary")
    p.add_argument("--d-models", default="64,128,256,512", help="d values of --vary d")
    p.add_argument("--point", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.lengths = [int(n) for n in args.lengths.split(",")]
    args.d_models = [int(d) for d in args.d_models.split(",")]
    return args


def main(argv=None):
    args = _parse(argv)
    if args.point:
        unit, window, length = json.loads(args.point)
        point = measure_point(
            unit, window, length, args.d_model, args.heads, args.repeats, args.min_seconds
        )
        print(json.dumps(point))
        return 0
    if args.report:
        saved = json.loads(pathlib.Path(args.report).read_text())
        if "sweep" in saved:
            print(sweep_report(saved["sweep"], saved["vary"], saved["n"]))
            return 0
        results = {
            unit: {mode: {int(n): p for n, p in points.items()} for mode, points in modes.items()}
            for unit, modes in saved.items()
        }
        args.lengths = sorted(next(iter(next(iter(results.values())).values())))
        print(report(results, args))
        return 0
    if args.vary:
        results = sweep(args)
        if args.output:
            saved = {"vary": args.vary, "n": args.n, "heads": args.heads, "sweep": results}
            pathlib.Path(args.output).write_text(json.dumps(saved, indent=1) + "\n")
        print(sweep_report(results, args.vary, args.n))
        return 0
    modes = {"full": None, **{f"r={r}": int(r) for r in args.windows.split(",")}}
    results = {}
    for unit in args.units.split(","):
        results[unit] = {mode: {} for mode in modes}
        for n in args.lengths:
            for mode, window in modes.items():
                point = run_point(args, unit, window, n)
                results[unit][mode][n] = point
                print(f"{unit} {mode} n={n}: {json.dumps(point)}", flush=True)
    if args.output:
        pathlib.Path(args.output).write_text(json.dumps(results, indent=1) + "\n")
    print(report(results, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
