"""GFLOP/s of TensorFlow's float32 matmul on the shapes of one decoding step, beside a large one.

The question (issue 18): is our decoding step behind CTranslate2's because TensorFlow's matmuls
are slow on the small shapes of a step, or because of the rest of the step? Each shape runs
``--reps`` times inside one ``tf.function`` loop (no Python per matmul); NumPy's BLAS on the same
shapes is printed beside it for reference.

Usage::

    python -m benchmarks.search.decoder_matmuls  # small preset, 64 sentences x beam 4
    python -m benchmarks.search.decoder_matmuls --rows 64 --vocab 8000
"""

import argparse
import time

import numpy as np
import tensorflow as tf


def step_shapes(rows: int, d_model: int, d_ff: int, vocab: int) -> dict:
    """(m, k, n) of the decoder step's projections for ``rows`` hypotheses."""
    return {
        "self-attention Q/K/V (fused)": (rows, d_model, 3 * d_model),
        "attention output / cross Q": (rows, d_model, d_model),
        "feed-forward in": (rows, d_model, d_ff),
        "feed-forward out": (rows, d_ff, d_model),
        "tied output projection": (rows, d_model, vocab),
        "large (2048^3)": (2048, 2048, 2048),
    }


def tf_rate(m: int, k: int, n: int, reps: int) -> float:
    a, b = tf.random.normal([m, k]), tf.random.normal([k, n])

    @tf.function
    def repeat(a, b):
        total = tf.zeros([m, n])
        for _ in tf.range(reps):
            total += tf.matmul(a, b)
        return total

    repeat(a, b).numpy()  # trace and warm up
    start = time.perf_counter()
    repeat(a, b).numpy()
    return 2 * m * k * n * reps / (time.perf_counter() - start) / 1e9


def numpy_rate(m: int, k: int, n: int, reps: int) -> float:
    a = np.random.randn(m, k).astype(np.float32)
    b = np.random.randn(k, n).astype(np.float32)
    a @ b
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * m * k * n * reps / (time.perf_counter() - start) / 1e9


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=256, help="hypotheses per step (batch x beam)")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=4000)
    p.add_argument("--reps", type=int, default=300)
    args = p.parse_args(argv)
    for name, (m, k, n) in step_shapes(args.rows, args.d_model, args.d_ff, args.vocab).items():
        reps = 10 if m == 2048 else args.reps
        print(
            f"{name:30s} [{m}, {k}] x [{k}, {n}]: TensorFlow {tf_rate(m, k, n, reps):6.0f} "
            f"GFLOP/s, NumPy {numpy_rate(m, k, n, reps):6.0f} GFLOP/s",
            flush=True,
        )


if __name__ == "__main__":
    main()
