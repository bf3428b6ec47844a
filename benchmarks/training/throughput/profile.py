"""``--profile``: our step split into its parts, and a layer micro-benchmark.

Same batches as the main timing: forward, forward + loss, forward + backward (no update), then the
full ``train_on_batch`` step with ``compile_model``'s loss and metrics, without metrics, with plain
cross-entropy and with Keras' sparse cross-entropy. The micro-benchmark times forward + backward of
one self-attention and one feed-forward layer, ours and Keras' ``MultiHeadAttention``.
"""

from __future__ import annotations

from benchmarks.training.throughput.settings import D_FF, D_MODEL, NUM_HEADS
from benchmarks.training.throughput.timing import best_seconds, time_steps

FULL_STEP = "full step (compile_model: LS 0.1 + 3 metrics)"
MICRO_BATCH, MICRO_LENGTH = 160, 24  # a typical token-budget batch


def profile_ours(model, batches, warmup, jit, macs) -> dict:
    """ms per step of each part of our step (see the module docstring), plus ``"micro"``."""
    out = {}

    def run(name, step):
        result = time_steps(step, batches, warmup, jit)
        out[name] = 1e3 * sum(result["step_times"]) / len(result["step_times"])
        print(f"  profile {name:<42} {out[name]:8.1f} ms/step", flush=True)

    for name, step in _step_parts(model, jit):
        run(name, step)
    for name, loss, metrics in _loss_variants():
        _recompile(model, loss, metrics, jit)
        run(name, lambda b: model.train_on_batch(b[0], b[1]))
    out["micro"] = micro_benchmark(jit)
    return out


def _step_parts(model, jit):
    """(name, step) of the forward, forward + loss and forward + backward passes."""
    import tensorflow as tf

    from keras_transformer.losses import LabelSmoothedCrossEntropy

    loss_fn = LabelSmoothedCrossEntropy(label_smoothing=0.1)
    variables = model.trainable_variables

    @tf.function(jit_compile=jit, reduce_retracing=True)
    def forward(inputs):
        return tf.reduce_sum(model(inputs, training=True)[:, 0, 0])

    @tf.function(jit_compile=jit, reduce_retracing=True)
    def forward_loss(inputs, labels):
        return loss_fn(labels, model(inputs, training=True))

    @tf.function(jit_compile=jit, reduce_retracing=True)
    def forward_backward(inputs, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(inputs, training=True))
        grads = tape.gradient(loss, variables)
        # One scalar out of every gradient, so no gradient is pruned from the graph.
        dense = [g.values if isinstance(g, tf.IndexedSlices) else g for g in grads]
        return loss + 0.0 * tf.add_n([tf.reduce_sum(g) for g in dense])

    return [
        ("forward (training=True)", lambda b: forward(b[0]).numpy()),
        ("forward + loss", lambda b: forward_loss(b[0], b[1]).numpy()),
        ("forward + backward (no update)", lambda b: forward_backward(b[0], b[1]).numpy()),
    ]


def _loss_variants():
    """(name, loss, metrics) of the full steps compared."""
    import keras

    from keras_transformer.losses import LabelSmoothedCrossEntropy
    from keras_transformer.metrics import MaskedAccuracy, Perplexity, TokenCount

    return [
        (FULL_STEP, LabelSmoothedCrossEntropy(0.1), [MaskedAccuracy(), Perplexity(), TokenCount()]),
        ("step, LS 0.1, no metrics", LabelSmoothedCrossEntropy(0.1), []),
        ("step, plain CE (LS 0), no metrics", LabelSmoothedCrossEntropy(0.0), []),
        (
            "step, keras SparseCE(ignore_class=0)",
            keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0),
            [],
        ),
    ]


def _recompile(model, loss, metrics, jit):
    from keras_transformer.schedules import transformer_optimizer

    model.compile(
        optimizer=transformer_optimizer(D_MODEL, warmup_steps=4000),
        loss=loss,
        metrics=metrics,
        jit_compile=jit,
    )


def micro_benchmark(jit) -> dict:
    """Best fwd+bwd ms and GFLOP/s of one attention / feed-forward layer at a typical batch."""
    import keras
    import tensorflow as tf

    from keras_transformer.layers.attention import MultiHeadAttention
    from keras_transformer.layers.feedforward import PositionwiseFeedForward

    b, t = MICRO_BATCH, MICRO_LENGTH
    x = tf.random.normal((b, t, D_MODEL))
    mask = tf.ones((b, t), tf.bool)
    x = tf.cast(x, keras.mixed_precision.global_policy().compute_dtype)
    layers = {
        "ours MultiHeadAttention": MultiHeadAttention(NUM_HEADS),
        "keras.layers.MultiHeadAttention": keras.layers.MultiHeadAttention(
            NUM_HEADS, D_MODEL // NUM_HEADS
        ),
        "ours PositionwiseFeedForward": PositionwiseFeedForward(D_FF),
    }
    micro = {}
    for name, layer in layers.items():
        if "FeedForward" in name:
            call = lambda inp, layer=layer: layer(inp)
            macs_per = b * t * 2 * D_MODEL * D_FF
        else:
            call = lambda inp, layer=layer: layer(inp, inp, attention_mask=mask[:, None, :])
            macs_per = b * t * 4 * D_MODEL * D_MODEL + 2 * b * t * t * D_MODEL
        best = _best_fwd_bwd(call, layer, x, jit)
        micro[name] = {"ms": 1e3 * best, "gflops": 6.0 * macs_per / best / 1e9}
        print(
            f"  micro {name:<34} fwd+bwd {1e3 * best:7.2f} ms  "
            f"{micro[name]['gflops']:6.1f} GFLOP/s  (batch {b}x{t}x{D_MODEL})",
            flush=True,
        )
    return micro


def _best_fwd_bwd(call, layer, x, jit) -> float:
    """Best of 10 timed forward + backward passes of ``call(x)`` (after building and tracing)."""
    import tensorflow as tf

    call(x)

    @tf.function(jit_compile=jit)
    def fwd_bwd(inp):
        with tf.GradientTape() as tape:
            tape.watch(inp)
            y = tf.reduce_sum(tf.cast(call(inp), tf.float32))
        grads = tape.gradient(y, [inp, *layer.trainable_variables])
        return tf.add_n([tf.reduce_sum(tf.cast(g, tf.float32)) for g in grads])

    fwd_bwd(x).numpy()
    return best_seconds(lambda: fwd_bwd(x).numpy(), 10)
