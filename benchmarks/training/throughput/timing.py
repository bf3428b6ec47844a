"""Wall-clock measurements: the best ``tf.matmul`` rate, the step timer, resident memory."""

from __future__ import annotations

import time


def rss_kib() -> int:
    """Current resident set size of this process (``VmRSS``), KiB; 0 where unknown."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def peak_rss_kib() -> int:
    """Peak resident set size of this process so far (``ru_maxrss``, KiB on Linux)."""
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def matmul_peaks(n, reps) -> dict:
    """Best GFLOP/s of an n x n x n tf.matmul, fp32 and bf16, with and without XLA."""
    import tensorflow as tf

    out = {}
    for dtype in ("float32", "bfloat16"):
        a = tf.cast(tf.random.normal((n, n)), dtype)
        b = tf.cast(tf.random.normal((n, n)), dtype)
        for jit in (False, True):
            key = f"{dtype}{'_jit' if jit else ''}"
            fn = tf.function(lambda x, y: tf.matmul(x, y)[0, 0], jit_compile=jit)
            try:
                fn(a, b).numpy()
                seconds = best_seconds(lambda fn=fn, a=a, b=b: fn(a, b).numpy(), reps)
                out[key] = 2.0 * n**3 / seconds / 1e9
            except Exception as err:  # e.g. no bf16 XLA kernel
                out[key] = None
                out[f"{key}_error"] = f"{type(err).__name__}: {err}"[:200]
    return out


def best_seconds(call, reps) -> float:
    """The fastest of ``reps`` timed calls of ``call()``."""
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def _shape_key(batch):
    return tuple(batch[3].shape) + tuple(batch[2].shape)[1:]  # (B, T, S)


def time_steps(step, batches, warmup, jit, label=""):
    """Runs ``step(batch)`` on warm-up batches, then once per new shape (compile pass), then times
    every non-warm-up batch.

    Returns dict with per-step seconds of the timed batches and the warm-up / compile costs.
    """
    seen = set()
    warm_start = time.perf_counter()
    for batch in batches[:warmup]:
        step(batch)
        seen.add(_shape_key(batch))
    warm_seconds = time.perf_counter() - warm_start
    timed = batches[warmup:]
    # Compile pass (untimed): XLA compiles every new shape, so run each timed shape once. That
    # holds for our loss and metrics even when the model is not jit-compiled (their work over
    # [B, T, V] is an XLA function); Keras' tf.function (reduce_retracing=True) itself retraces
    # until every axis has been seen with two values. A long training run sees every bucket shape
    # in its first epoch, so the timed steps measure the steady state.
    compiled = 0
    start = time.perf_counter()
    for batch in timed:
        if _shape_key(batch) not in seen:
            seen.add(_shape_key(batch))
            step(batch)
            compiled += 1
    compile_seconds = time.perf_counter() - start
    times = []
    for i, batch in enumerate(timed):
        start = time.perf_counter()
        step(batch)
        times.append(time.perf_counter() - start)
        if label and (i + 1) % 10 == 0:
            print(
                f"  {label}: {i + 1}/{len(timed)} steps, last {times[-1] * 1e3:.0f} ms", flush=True
            )
    return {
        "warmup_s": warm_seconds,
        "compile_pass_s": compile_seconds,
        "compile_pass_steps": compiled,
        "step_times": times,
    }
