# Training throughput (paper section 5.2 reports training cost; section 5.1 batches by length): real
# tokens per second and the share of the measured matmul peak, for our model against a keras-hub
# baseline of the same size, each with its natural input pipeline, in fp32 / bf16, with and without
# XLA.
"""Benchmark training throughput: keras_transformer vs a keras-hub baseline on Multi30k en->de.

Usage::

    python benchmarks/train_throughput.py                       # all 4 settings, ~30-60 min
    python benchmarks/train_throughput.py --quick               # smoke test, a few steps
    python benchmarks/train_throughput.py --settings fp32,bf16 --steps 40 --output tt.json
    python benchmarks/train_throughput.py --baseline-tokenizer sentencepiece   # same token units

Systems (same sizes: 3+3 layers, d_model 256, 8 heads, d_ff 1024, dropout 0.1):

* ``ours``: ``build_transformer`` (post-norm, tied BPE embeddings shared by both languages,
  ``SubwordTokenizer.train`` on Multi30k train with the BLEU recipe's vocabulary size,
  ``data.vocab_size`` of ``configs/multi30k.yaml``, or ``--vocab-size``), ``make_dataset``
  token-budget batches (4096), ``compile_model`` (Adam + warmup schedule, label smoothing 0.1,
  accuracy, perplexity and token count metrics).
* ``baseline``: the keras.io "English-to-Spanish translation with KerasHub" recipe adapted to
  Multi30k: ``TokenAndPositionEmbedding`` + ``TransformerEncoder``/``TransformerDecoder``
  (mask_zero=True, so attention masks padding), separate cased WordPiece vocabularies
  (``compute_word_piece_vocabulary``, <= 15000 each) or, with ``--baseline-tokenizer
  sentencepiece``, our BPE for both sides with separate embedding tables; every sentence
  packed/padded to 40 (``StartEndPacker``), 64 pairs per batch, Dropout(0.5) + Dense(vocab) +
  float32 softmax, rmsprop, ``SparseCategoricalCrossentropy(ignore_class=0)``, accuracy.

Settings: ``fp32``, ``fp32_jit``, ``bf16`` (``mixed_bfloat16`` policy), ``bf16_jit``. Every
(setting, system) pair runs in its own subprocess (policies and XLA caches cannot leak; peak RSS
is per process); results are gathered into one table, so all numbers come from one run.

What is measured, per (setting, system):

* The step: ``model.train_on_batch`` on real batches taken in order from the system's own
  (shuffled, seeded) pipeline and materialised beforehand, so tf.data time is not in the step.
  ``--warmup`` steps are run first; then every batch shape of the timed set is run once before
  timing (XLA, and our XLA-compiled loss and metrics, compile once per shape; ours has many
  shapes; the compile pass is reported separately as ``compile_s``).
* Tokens: "tgt" = real target tokens (non-padding labels, EOS included, the figure
  ``TokenCount``/``TokensPerSecond`` report during training); "src+tgt" = that plus non-padding
  source tokens. Also sentence pairs/s, which does not depend on the tokenization (WordPiece makes
  fewer, longer tokens than our BPE, so token rates of the two systems are not the same unit
  unless ``--baseline-tokenizer sentencepiece``).
* Padded share: padding slots / all slots of source + labels in the timed batches (and over one
  whole epoch of each pipeline, measured once in the prepare step).
* FLOPs: 6 * (matmul parameters a position touches) per position + attention score terms, i.e.
  forward = 2 * MACs, backward = 2 * forward. Per source position: L_enc * (4 d^2 + 2 d d_ff) +
  L_dec * 2 d^2 (cross-attention K, V); per target position: L_dec * (6 d^2 + 2 d d_ff) + d V_out
  (output projection); per sequence and layer: 2 d S^2 (encoder), 2 d T^2 (decoder self, full
  square as computed), 2 d T S (cross). Embedding lookups, layer norms, softmax, biases, the loss
  and the optimizer are not counted. "executed" counts every padded slot (what the CPU actually
  multiplies), "useful" only real positions. "%peak" = executed GFLOP/s / the best
  ``tf.matmul`` GFLOP/s of the same dtype measured in the same process (n x n, with and without
  XLA, before and after training; bf16 peak for the bf16 settings).
* Peak RSS: ``ru_maxrss`` of the subprocess (data, model, optimizer, compiled functions).

With ``--profile`` (default ``fp32``) our step is also split into forward / forward+backward /
full step, and re-timed without metrics, with plain cross-entropy and with Keras' sparse CE, plus
a layer micro-benchmark (our attention vs ``keras.layers.MultiHeadAttention``, our feed-forward).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import platform
import subprocess
import sys
import tempfile
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# keras-hub's sub-layers warn that they drop the mask; the Transformer layers still get it (checked:
# outputs at real positions do not change with the amount of padding).
warnings.filterwarnings("ignore", message=".*does not support masking.*")

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SETTINGS = {  # name -> (dtype policy, jit_compile)
    "fp32": (None, False),
    "fp32_jit": (None, True),
    "bf16": ("mixed_bfloat16", False),
    "bf16_jit": ("mixed_bfloat16", True),
}
SYSTEMS = ("ours", "baseline")

# Sizes shared by both systems (the issue: 3+3 layers, d_model 256, 8 heads, d_ff 1024).
NUM_LAYERS, D_MODEL, NUM_HEADS, D_FF, DROPOUT = 3, 256, 8, 1024, 0.1
OURS_TOKENS_PER_BATCH, OURS_MAX_LENGTH = 4096, 128
RECIPE_CONFIG = REPO / "configs" / "multi30k.yaml"  # ours uses the BLEU recipe's vocabulary size
BASE_VOCAB, BASE_SEQUENCE_LENGTH, BASE_BATCH = 15000, 40, 64
WORDPIECE_RESERVED = ["[PAD]", "[UNK]", "[START]", "[END]"]


# ============================================================================ helpers (no TF)
def recipe_vocab_size() -> int:
    """``data.vocab_size`` of the Multi30k BLEU recipe (configs/multi30k.yaml)."""
    import yaml

    return int(yaml.safe_load(RECIPE_CONFIG.read_text())["data"]["vocab_size"])


def _sha(paths, *extra) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(pathlib.Path(path).read_bytes())
    for item in extra:
        digest.update(repr(item).encode())
    return digest.hexdigest()[:12]


def _rss_kib() -> int:
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _peak_rss_kib() -> int:
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)  # KiB on Linux


def flop_model(d, d_ff, enc_layers, dec_layers, out_vocab) -> dict:
    """Multiply-accumulates per position / per attention pair (see the module docstring)."""
    return {
        "per_source_position": enc_layers * (4 * d * d + 2 * d * d_ff) + dec_layers * 2 * d * d,
        "per_target_position": dec_layers * (6 * d * d + 2 * d * d_ff) + d * out_vocab,
        "enc_self_pair": enc_layers * 2 * d,   # x S^2 per sequence
        "dec_self_pair": dec_layers * 2 * d,   # x T^2
        "cross_pair": dec_layers * 2 * d,      # x T*S
    }


def batch_stats(source, labels, macs) -> dict:
    """Token counts and training FLOPs of one batch (numpy int arrays, 0 = padding)."""
    import numpy as np

    s_len = (source != 0).sum(axis=1).astype(np.int64)
    t_len = (labels != 0).sum(axis=1).astype(np.int64)
    b, s, t = source.shape[0], source.shape[1], labels.shape[1]

    def train_flops(src_pos, tgt_pos, ss, tt, ts):
        mac = (macs["per_source_position"] * src_pos + macs["per_target_position"] * tgt_pos
               + macs["enc_self_pair"] * ss + macs["dec_self_pair"] * tt + macs["cross_pair"] * ts)
        return 6.0 * mac  # forward 2 * MACs, backward twice the forward

    return {
        "pairs": int(b),
        "shape": [int(b), int(s), int(t)],
        "tgt_tokens": int(t_len.sum()),
        "src_tokens": int(s_len.sum()),
        "slots": int(b * s + b * t),
        "executed_flops": train_flops(b * s, b * t, b * s * s, b * t * t, b * t * s),
        "useful_flops": train_flops(int(s_len.sum()), int(t_len.sum()), int((s_len ** 2).sum()),
                                    int((t_len ** 2).sum()), int((t_len * s_len).sum())),
    }


# ============================================================================ data (child side)
def _corpus(args):
    root = pathlib.Path(args.data_dir) / "multi30k"
    return root / "train.en", root / "train.de"


def _sp_model_path(args) -> pathlib.Path:
    src, tgt = _corpus(args)
    return pathlib.Path(args.cache_dir) / f"sp{args.vocab_size}-{_sha([src, tgt])}.model"


def _wordpiece_paths(args):
    src, tgt = _corpus(args)
    key = _sha([src, tgt], BASE_VOCAB, WORDPIECE_RESERVED)
    cache = pathlib.Path(args.cache_dir)
    return cache / f"wordpiece-en-{key}.txt", cache / f"wordpiece-de-{key}.txt"


def prepare_tokenizers(args) -> dict:
    """Trains (or finds in --cache-dir) the SentencePiece model and the WordPiece vocabularies."""
    from keras_transformer.tokenization import SubwordTokenizer

    info = {}
    src, tgt = _corpus(args)
    pathlib.Path(args.cache_dir).mkdir(parents=True, exist_ok=True)
    sp_path = _sp_model_path(args)
    start = time.perf_counter()
    if not sp_path.exists():
        tokenizer = SubwordTokenizer.train([src, tgt], vocab_size=args.vocab_size)
        tokenizer.write_model(sp_path)
    info["sentencepiece"] = {"path": str(sp_path), "seconds": time.perf_counter() - start}
    if args.baseline_tokenizer == "wordpiece":
        import keras_hub

        for path, corpus in zip(_wordpiece_paths(args), (src, tgt)):
            start = time.perf_counter()
            if not path.exists():
                tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
                keras_hub.tokenizers.compute_word_piece_vocabulary(
                    [str(corpus)], vocabulary_size=BASE_VOCAB, lowercase=False,
                    reserved_tokens=WORDPIECE_RESERVED, vocabulary_output_file=str(tmp))
                os.replace(tmp, path)
            size = sum(1 for _ in open(path, encoding="utf-8"))
            info[f"wordpiece_{corpus.suffix[1:]}"] = {
                "path": str(path), "vocab_size": size, "seconds": time.perf_counter() - start}
    return info


def ours_dataset(args):
    from keras_transformer import data
    from keras_transformer.tokenization import SubwordTokenizer

    tokenizer = SubwordTokenizer(str(_sp_model_path(args)))
    pairs = data.read_parallel_text(*_corpus(args))
    dataset = data.make_dataset(pairs, tokenizer, tokens_per_batch=OURS_TOKENS_PER_BATCH,
                                max_length=OURS_MAX_LENGTH, seed=args.seed)
    # -> (source, labels) numpy-friendly pairs; the decoder input is rebuilt from labels later.
    return dataset, {"source_vocab": tokenizer.vocab_size, "target_vocab": tokenizer.vocab_size,
                     "tokenizer": f"SentencePiece BPE {tokenizer.vocab_size}, shared"}


def baseline_dataset(args):
    """The keras.io KerasHub recipe's pipeline: tokenize, pack to 40 (target 41), batch 64."""
    import keras_hub
    import tensorflow as tf

    from keras_transformer import data
    from keras_transformer.tokenization import BOS_ID, EOS_ID, PAD_ID, SubwordTokenizer

    if args.baseline_tokenizer == "wordpiece":
        vocab_paths = _wordpiece_paths(args)
        vocabs = [[line.rstrip("\n") for line in open(p, encoding="utf-8")] for p in vocab_paths]
        src_tok, tgt_tok = (keras_hub.tokenizers.WordPieceTokenizer(vocabulary=v, lowercase=False,
                                                                    oov_token="[UNK]")
                            for v in vocabs)
        pad, start, end = (tgt_tok.token_to_id(t) for t in ("[PAD]", "[START]", "[END]"))
        sizes = [len(v) for v in vocabs]
        name = f"WordPiece cased, separate: en {sizes[0]}, de {sizes[1]}"
    else:
        sp = SubwordTokenizer(str(_sp_model_path(args)))
        src_tok = tgt_tok = sp.tokenize
        pad, start, end = PAD_ID, BOS_ID, EOS_ID
        sizes = [sp.vocab_size, sp.vocab_size]
        name = f"SentencePiece BPE {sp.vocab_size} (ours) for both, separate embedding tables"
    if pad != 0:
        raise ValueError(f"baseline padding id is {pad}, expected 0")
    src_packer = keras_hub.layers.StartEndPacker(sequence_length=BASE_SEQUENCE_LENGTH,
                                                 pad_value=pad)
    tgt_packer = keras_hub.layers.StartEndPacker(sequence_length=BASE_SEQUENCE_LENGTH + 1,
                                                 start_value=start, end_value=end, pad_value=pad)

    def preprocess(source, target):
        source = src_packer(src_tok(source))
        target = tgt_packer(tgt_tok(target))
        return tf.cast(source, tf.int32), tf.cast(target[:, :-1], tf.int32), tf.cast(
            target[:, 1:], tf.int32)

    pairs = data.read_parallel_text(*_corpus(args))
    pairs = pairs.shuffle(30000, seed=args.seed)
    dataset = pairs.batch(BASE_BATCH).map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset, {"source_vocab": sizes[0], "target_vocab": sizes[1], "tokenizer": name}


def take_batches(system, args, count):
    """``count`` batches as (inputs dict, labels, numpy source, numpy labels)."""
    import tensorflow as tf

    if system == "ours":
        dataset, info = ours_dataset(args)
        dataset = dataset.map(lambda inputs, labels: (inputs["source"], inputs["target"], labels))
        keys = ("source", "target")
    else:
        dataset, info = baseline_dataset(args)
        keys = ("encoder_inputs", "decoder_inputs")
    batches = []
    for source, target, labels in dataset.take(count):
        batches.append(({keys[0]: tf.identity(source), keys[1]: tf.identity(target)},
                        tf.identity(labels), source.numpy(), labels.numpy()))
    if len(batches) < count:
        raise RuntimeError(f"{system}: the pipeline gave {len(batches)} batches, {count} needed")
    return batches, info


def epoch_stats(args) -> dict:
    """Padding share and shape count of one full epoch of each natural pipeline."""
    import numpy as np

    out = {}
    for system in SYSTEMS:
        if system == "ours":
            dataset, _ = ours_dataset(args)
            dataset = dataset.map(lambda inputs, labels: (inputs["source"], labels))
        else:
            dataset, _ = baseline_dataset(args)
            dataset = dataset.map(lambda source, target, labels: (source, labels))
        real = slots = pairs = batches = tgt = truncated = 0
        shapes = set()
        for source, labels in dataset:
            source, labels = source.numpy(), labels.numpy()
            batches += 1
            pairs += source.shape[0]
            real += int((source != 0).sum() + (labels != 0).sum())
            tgt += int((labels != 0).sum())
            slots += source.size + labels.size
            shapes.add(source.shape + labels.shape[1:])
            if system == "baseline":  # a full row has no padding left: the sentence was cut
                truncated += int((source[:, -1] != 0).sum() + (labels[:, -1] != 0).sum())
        out[system] = {"batches": batches, "pairs": pairs, "real_tokens": real,
                       "target_tokens": tgt, "slots": slots,
                       "padded_share": 1.0 - real / max(slots, 1),
                       "distinct_shapes": len(shapes),
                       "mean_target_tokens_per_pair": tgt / max(pairs, 1)}
        if system == "baseline":
            out[system]["rows_filling_40"] = truncated
    return out


# ============================================================================ models (child side)
def build_ours(source_vocab, jit):
    from keras_transformer import TransformerConfig, build_transformer
    from keras_transformer.training import TrainingSettings, compile_model

    config = TransformerConfig.small(vocab_size=source_vocab, num_layers=NUM_LAYERS,
                                     d_model=D_MODEL, num_heads=NUM_HEADS, d_ff=D_FF,
                                     dropout=DROPOUT, max_length=OURS_MAX_LENGTH)
    model = build_transformer(config)
    compile_model(model, config.d_model, TrainingSettings(jit_compile=jit))
    return model


def build_baseline(source_vocab, target_vocab, jit, optimizer="rmsprop"):
    import keras
    import keras_hub

    encoder_inputs = keras.Input(shape=(None,), dtype="int32", name="encoder_inputs")
    x = keras_hub.layers.TokenAndPositionEmbedding(
        vocabulary_size=source_vocab, sequence_length=BASE_SEQUENCE_LENGTH, embedding_dim=D_MODEL,
        mask_zero=True)(encoder_inputs)
    for _ in range(NUM_LAYERS):
        x = keras_hub.layers.TransformerEncoder(intermediate_dim=D_FF, num_heads=NUM_HEADS,
                                                dropout=DROPOUT)(inputs=x)
    decoder_inputs = keras.Input(shape=(None,), dtype="int32", name="decoder_inputs")
    y = keras_hub.layers.TokenAndPositionEmbedding(
        vocabulary_size=target_vocab, sequence_length=BASE_SEQUENCE_LENGTH, embedding_dim=D_MODEL,
        mask_zero=True)(decoder_inputs)
    for _ in range(NUM_LAYERS):
        y = keras_hub.layers.TransformerDecoder(intermediate_dim=D_FF, num_heads=NUM_HEADS,
                                                dropout=DROPOUT)(decoder_sequence=y,
                                                                 encoder_sequence=x)
    y = keras.layers.Dropout(0.5)(y)
    logits = keras.layers.Dense(target_vocab)(y)
    # The recipe's Dense(activation="softmax"), with the softmax in float32 as the Keras mixed
    # precision guide asks (identical in fp32).
    probabilities = keras.layers.Activation("softmax", dtype="float32")(logits)
    model = keras.Model([encoder_inputs, decoder_inputs], probabilities, name="keras_hub_baseline")
    model.compile(optimizer=optimizer,
                  loss=keras.losses.SparseCategoricalCrossentropy(ignore_class=0),
                  metrics=["accuracy"], jit_compile=jit)
    return model


# ============================================================================ timing (child side)
def matmul_peaks(n, reps) -> dict:
    """Best GFLOP/s of an n x n x n tf.matmul, fp32 and bf16, with and without XLA."""
    import tensorflow as tf

    out = {}
    for dtype in ("float32", "bfloat16"):
        a = tf.cast(tf.random.normal((n, n)), dtype)
        b = tf.cast(tf.random.normal((n, n)), dtype)
        for jit in (False, True):
            fn = tf.function(lambda x, y: tf.matmul(x, y)[0, 0], jit_compile=jit)
            try:
                fn(a, b).numpy()
                best = float("inf")
                for _ in range(reps):
                    start = time.perf_counter()
                    fn(a, b).numpy()
                    best = min(best, time.perf_counter() - start)
                out[f"{dtype}{'_jit' if jit else ''}"] = 2.0 * n ** 3 / best / 1e9
            except Exception as err:  # e.g. no bf16 XLA kernel
                out[f"{dtype}{'_jit' if jit else ''}"] = None
                out[f"{dtype}{'_jit' if jit else ''}_error"] = f"{type(err).__name__}: {err}"[:200]
    return out


def time_steps(step, batches, warmup, jit, label=""):
    """Runs ``step(batch)`` on warm-up batches, then once per new shape (compile pass), then times
    every non-warm-up batch.

    Returns dict with per-step seconds of the timed batches and the warm-up / compile costs.
    """
    seen = set()
    warm_start = time.perf_counter()
    for batch in batches[:warmup]:
        step(batch)
        seen.add(tuple(batch[3].shape) + tuple(batch[2].shape)[1:])  # (B, T, S)
    warm_seconds = time.perf_counter() - warm_start
    timed = batches[warmup:]
    # Compile pass (untimed): XLA compiles every new shape, so run each timed shape once. That
    # holds for our loss and metrics even when the model is not jit-compiled (their work over
    # [B, T, V] is an XLA function); Keras' tf.function (reduce_retracing=True) itself retraces
    # until every axis has been seen with two values. A long training run sees every bucket shape
    # in its first epoch, so the timed steps measure the steady state.
    compile_seconds, compiled = 0.0, 0
    start = time.perf_counter()
    for batch in timed:
        shape = tuple(batch[3].shape) + tuple(batch[2].shape)[1:]
        if shape not in seen:
            seen.add(shape)
            step(batch)
            compiled += 1
    compile_seconds = time.perf_counter() - start
    times = []
    for i, batch in enumerate(timed):
        start = time.perf_counter()
        step(batch)
        times.append(time.perf_counter() - start)
        if label and (i + 1) % 10 == 0:
            print(f"  {label}: {i + 1}/{len(timed)} steps, last {times[-1] * 1e3:.0f} ms",
                  flush=True)
    return {"warmup_s": warm_seconds, "compile_pass_s": compile_seconds,
            "compile_pass_steps": compiled, "step_times": times}


def summarize(times, stats, peak_gflops) -> dict:
    import numpy as np

    total = float(sum(times))
    agg = {k: sum(s[k] for s in stats) for k in ("pairs", "tgt_tokens", "src_tokens", "slots",
                                                  "executed_flops", "useful_flops")}
    real = agg["tgt_tokens"] + agg["src_tokens"]
    executed = agg["executed_flops"] / total / 1e9
    return {
        "steps": len(times),
        "seconds": total,
        "step_ms_mean": 1e3 * total / len(times),
        "step_ms_median": 1e3 * float(np.median(times)),
        "step_ms_min": 1e3 * float(min(times)),
        "pairs_per_batch": agg["pairs"] / len(times),
        "tgt_tokens_per_batch": agg["tgt_tokens"] / len(times),
        "padded_share": 1.0 - real / agg["slots"],
        "tgt_tokens_per_s": agg["tgt_tokens"] / total,
        "src_tgt_tokens_per_s": real / total,
        "pairs_per_s": agg["pairs"] / total,
        "executed_gflops": executed,
        "useful_gflops": agg["useful_flops"] / total / 1e9,
        "peak_share_executed": executed / peak_gflops if peak_gflops else None,
        "peak_share_useful": (agg["useful_flops"] / total / 1e9 / peak_gflops
                              if peak_gflops else None),
    }


def profile_ours(model, batches, warmup, jit, macs) -> dict:
    """Splits our step: forward, forward+backward (no update), full step without metrics, with
    plain CE and with Keras' CE; plus a layer micro-benchmark. Same batches as the main timing."""
    import keras
    import tensorflow as tf

    from keras_transformer.layers.attention import MultiHeadAttention
    from keras_transformer.layers.feedforward import PositionwiseFeedForward
    from keras_transformer.losses import LabelSmoothedCrossEntropy
    from keras_transformer.schedules import transformer_optimizer

    out = {}
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
        return loss + 0.0 * tf.add_n([
            tf.reduce_sum(g.values if isinstance(g, tf.IndexedSlices) else g) for g in grads])

    def run(name, step):
        result = time_steps(step, batches, warmup, jit)
        out[name] = 1e3 * sum(result["step_times"]) / len(result["step_times"])
        print(f"  profile {name:<42} {out[name]:8.1f} ms/step", flush=True)

    run("forward (training=True)", lambda b: forward(b[0]).numpy())
    run("forward + loss", lambda b: forward_loss(b[0], b[1]).numpy())
    run("forward + backward (no update)", lambda b: forward_backward(b[0], b[1]).numpy())
    from keras_transformer.losses import MaskedAccuracy, Perplexity, TokenCount

    variants = [
        ("full step (compile_model: LS 0.1 + 3 metrics)", LabelSmoothedCrossEntropy(0.1),
         [MaskedAccuracy(), Perplexity(), TokenCount()]),
        ("step, LS 0.1, no metrics", LabelSmoothedCrossEntropy(0.1), []),
        ("step, plain CE (LS 0), no metrics", LabelSmoothedCrossEntropy(0.0), []),
        ("step, keras SparseCE(ignore_class=0)",
         keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0), []),
    ]
    for name, loss, metrics in variants:
        model.compile(optimizer=transformer_optimizer(D_MODEL, warmup_steps=4000), loss=loss,
                      metrics=metrics, jit_compile=jit)
        run(name, lambda b: model.train_on_batch(b[0], b[1]))

    # Layer micro-benchmark at a typical token-budget batch: fwd+bwd of one self-attention and one
    # feed-forward layer, ours vs Keras' MultiHeadAttention, as % of the executed-FLOP rate.
    b, t = 160, 24
    x = tf.random.normal((b, t, D_MODEL))
    mask = tf.ones((b, t), tf.bool)
    dtype = keras.mixed_precision.global_policy().compute_dtype
    x = tf.cast(x, dtype)
    layers = {
        "ours MultiHeadAttention": MultiHeadAttention(NUM_HEADS),
        "keras.layers.MultiHeadAttention": keras.layers.MultiHeadAttention(
            NUM_HEADS, D_MODEL // NUM_HEADS),
        "ours PositionwiseFeedForward": PositionwiseFeedForward(D_FF),
    }
    micro = {}
    for name, layer in layers.items():
        if "FeedForward" in name:
            call = lambda inp, layer=layer: layer(inp)  # noqa: E731
            macs_per = b * t * 2 * D_MODEL * D_FF
        else:
            call = lambda inp, layer=layer: layer(  # noqa: E731
                inp, inp, attention_mask=mask[:, None, :])
            macs_per = b * t * 4 * D_MODEL * D_MODEL + 2 * b * t * t * D_MODEL
        call(x)

        @tf.function(jit_compile=jit)
        def fwd_bwd(inp, call=call, layer=layer):
            with tf.GradientTape() as tape:
                tape.watch(inp)
                y = tf.reduce_sum(tf.cast(call(inp), tf.float32))
            grads = tape.gradient(y, [inp, *layer.trainable_variables])
            return tf.add_n([tf.reduce_sum(tf.cast(g, tf.float32)) for g in grads])

        fwd_bwd(x).numpy()
        best = float("inf")
        for _ in range(10):
            start = time.perf_counter()
            fwd_bwd(x).numpy()
            best = min(best, time.perf_counter() - start)
        micro[name] = {"ms": 1e3 * best, "gflops": 6.0 * macs_per / best / 1e9}
        print(f"  micro {name:<34} fwd+bwd {1e3 * best:7.2f} ms  "
              f"{micro[name]['gflops']:6.1f} GFLOP/s  (batch {b}x{t}x{D_MODEL})", flush=True)
    out["micro"] = micro
    return out


def child_measure(spec: dict) -> dict:
    args = argparse.Namespace(**spec["args"])
    setting, system = spec["setting"], spec["system"]
    policy, jit = SETTINGS[setting]
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(args.seed)
    keras.mixed_precision.set_global_policy(policy or "float32")
    print(f"[{setting} / {system}] TF {tf.__version__}, Keras {keras.__version__}, "
          f"policy {keras.mixed_precision.global_policy().name}, jit_compile={jit}", flush=True)
    peaks = [matmul_peaks(args.matmul_size, args.matmul_reps)]

    count = args.warmup + args.steps
    batches, data_info = take_batches(system, args, count)
    rss_before_model = _rss_kib()
    if system == "ours":
        model = build_ours(data_info["source_vocab"], jit)
    else:
        model = build_baseline(data_info["source_vocab"], data_info["target_vocab"], jit,
                               args.baseline_optimizer)
    macs = flop_model(D_MODEL, D_FF, NUM_LAYERS, NUM_LAYERS, data_info["target_vocab"])
    stats = [batch_stats(b[2], b[3], macs) for b in batches[args.warmup:]]
    print(f"[{setting} / {system}] {model.count_params():,} parameters; {len(batches)} batches "
          f"(first shapes {[s['shape'] for s in stats[:3]]})", flush=True)

    def step(batch):
        model.train_on_batch(batch[0], batch[1])

    start = time.perf_counter()
    timing = time_steps(step, batches, args.warmup, jit, label=f"{setting}/{system}")
    wall = time.perf_counter() - start
    peak_rss = _peak_rss_kib()
    peaks.append(matmul_peaks(args.matmul_size, args.matmul_reps))

    dtype = "bfloat16" if policy == "mixed_bfloat16" else "float32"
    candidates = [p.get(k) for p in peaks for k in (dtype, f"{dtype}_jit")]
    peak = max([c for c in candidates if c] or [0.0])
    result = {
        "setting": setting, "system": system, "policy": policy or "float32", "jit_compile": jit,
        "tokenizer": data_info["tokenizer"],
        "optimizer": "adam + schedule" if system == "ours" else args.baseline_optimizer,
        "source_vocab": data_info["source_vocab"],
        "target_vocab": data_info["target_vocab"], "params": int(model.count_params()),
        "flop_model_macs": macs, "matmul_peaks_gflops": peaks, "peak_gflops": peak,
        "peak_dtype": dtype, "warmup_steps": args.warmup, "warmup_s": timing["warmup_s"],
        "compile_pass_s": timing["compile_pass_s"],
        "compile_pass_steps": timing["compile_pass_steps"],
        "distinct_timed_shapes": len({tuple(s["shape"]) for s in stats}),
        "wall_s": wall, "rss_before_model_mib": rss_before_model / 1024,
        "peak_rss_mib": peak_rss / 1024,
        **summarize(timing["step_times"], stats, peak),
    }
    if system == "ours" and setting in args.profile:
        pbatches = batches[: args.warmup + max(2, min(args.steps, args.profile_steps))]
        result["profile_ms"] = profile_ours(model, pbatches, args.warmup, jit, macs)
        result["args_profile_steps"] = len(pbatches) - args.warmup
    return result


def child_prepare(spec: dict) -> dict:
    args = argparse.Namespace(**spec["args"])
    import tensorflow as tf

    start = time.perf_counter()
    out = {"tokenizers": prepare_tokenizers(args)}
    out["epoch"] = epoch_stats(args)
    out["seconds"] = time.perf_counter() - start
    out["tf_version"] = tf.__version__
    out["onednn"] = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on for x86 Linux)")
    return out


# ============================================================================ parent
def _cpu_info() -> dict:
    info = {"cpus": os.cpu_count(), "machine": platform.machine()}
    try:
        text = open("/proc/cpuinfo").read()
        for line in text.splitlines():
            if line.startswith("model name"):
                info["model"] = line.split(":", 1)[1].strip()
                break
        flags = next((l for l in text.splitlines() if l.startswith("flags")), "")
        info["avx512_bf16"] = "avx512_bf16" in flags
        info["amx_bf16"] = "amx_bf16" in flags
    except OSError:
        pass
    try:
        info["loadavg_at_start"] = os.getloadavg()
    except OSError:
        pass
    return info


def run_child(kind, spec, timeout):
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as handle:
        path = handle.name
    command = [sys.executable, os.path.abspath(__file__), "--child", kind,
               "--child-spec", json.dumps(spec), "--child-output", path]
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


def _fmt(value, spec, width):
    if value is None:
        return " " * (width - 1) + "-"
    return format(value, spec).rjust(width)


def print_report(report):
    prep = report.get("prepare", {})
    epoch = prep.get("epoch", {})
    print("\n" + "=" * 118)
    print(f"Training throughput, Multi30k en->de train; CPU {report['cpu'].get('model')} x "
          f"{report['cpu'].get('cpus')}, load avg at start {report['cpu'].get('loadavg_at_start')}")
    if epoch:
        for system in SYSTEMS:
            e = epoch.get(system, {})
            extra = (f", {e['rows_filling_40']} rows filling all 40 slots (cut or exactly 40)"
                     if "rows_filling_40" in e else "")
            print(f"  one epoch, {system:<8}: {e.get('batches')} batches, {e.get('pairs')} pairs, "
                  f"padded share {e.get('padded_share', 0):.1%} (src+labels), "
                  f"{e.get('distinct_shapes')} distinct batch shapes, "
                  f"{e.get('mean_target_tokens_per_pair', 0):.1f} target tokens/pair{extra}")
    runs = [r for r in report["runs"] if "error" not in r]
    for r in report["runs"]:
        if "error" in r:
            print(f"  {r['setting']}/{r['system']}: FAILED: {r['error']}")
    if not runs:
        return
    tokenizers = {r["system"]: r["tokenizer"] for r in runs}
    for system, name in tokenizers.items():
        print(f"  {system} tokenizer: {name}")
    print("  step ms = mean over the timed steps; compile s = untimed pass over new batch shapes "
          "(one untimed step per new shape: XLA and our XLA loss compile per shape).")
    print("  tgt tok/s = real target tokens (non-pad labels, EOS incl.) per second; src+tgt adds "
          "non-pad source tokens.\n  GFLOP/s executed = 6*params*all slots + attention (padding "
          "included), vs the best n x n tf.matmul of the same dtype in the same process.")
    header = (f"{'setting':<9}{'system':<9}{'step ms':>9}{'median':>8}{'pairs':>7}{'pad %':>7}"
              f"{'tgt tok/s':>11}{'src+tgt/s':>11}{'pairs/s':>9}{'GFLOP/s':>9}{'peak':>7}"
              f"{'%peak':>7}{'useful%':>8}"
              f"{'compile s':>10}{'RSS MiB':>9}")
    print("-" * len(header))
    print(header)
    print("-" * len(header))
    for r in runs:
        print(f"{r['setting']:<9}{r['system']:<9}{_fmt(r['step_ms_mean'], '.0f', 9)}"
              f"{_fmt(r['step_ms_median'], '.0f', 8)}"
              f"{_fmt(r['pairs_per_batch'], '.0f', 7)}{_fmt(100 * r['padded_share'], '.1f', 7)}"
              f"{_fmt(r['tgt_tokens_per_s'], ',.0f', 11)}"
              f"{_fmt(r['src_tgt_tokens_per_s'], ',.0f', 11)}"
              f"{_fmt(r['pairs_per_s'], '.1f', 9)}{_fmt(r['executed_gflops'], '.1f', 9)}"
              f"{_fmt(r['peak_gflops'], '.0f', 7)}"
              f"{_fmt(100 * (r['peak_share_executed'] or 0), '.1f', 7)}"
              f"{_fmt(100 * (r['peak_share_useful'] or 0), '.1f', 8)}"
              f"{_fmt(r['compile_pass_s'], '.0f', 10)}"
              f"{_fmt(r['peak_rss_mib'], '.0f', 9)}")
    print("-" * len(header))
    ratios = report.get("ratios", {})
    if ratios:
        print("ours / baseline             tgt tok/s  src+tgt/s   pairs/s")
        for name, value in ratios.items():
            print(f"  {name:<24}{_fmt(value['tgt_tokens_per_s'], '.2f', 11)}"
                  f"{_fmt(value['src_tgt_tokens_per_s'], '.2f', 11)}"
                  f"{_fmt(value['pairs_per_s'], '.2f', 10)}")
    checks = report.get("targets", [])
    if checks:
        print("targets of the issue:")
        for check in checks:
            status = "n/a " if check["value"] is None else ("PASS" if check["pass"] else "FAIL")
            value = "-" if check["value"] is None else f"{check['value']:.2f}"
            print(f"  [{status}] {check['name']}: {value} (target {check['target']})")
    for r in runs:
        if "profile_ms" in r:
            p = r["profile_ms"]
            print(f"profile of our step ({r['setting']}, ms per step on the first "
                  f"{r['args_profile_steps']} timed batches):")
            for name, value in r["profile_ms"].items():
                if name == "micro":
                    for layer, m in value.items():
                        share = m["gflops"] / r["peak_gflops"]
                        print(f"  micro {layer:<38} fwd+bwd {m['ms']:7.2f} ms "
                              f"{m['gflops']:7.1f} GFLOP/s ({share:.0%} of peak)")
                elif value is not None:
                    print(f"  {name:<48} {value:8.1f}")
            full = p.get("full step (compile_model: LS 0.1 + 3 metrics)")
            parts = [
                ("loss (LS 0.1) in the forward", p.get("forward + loss"),
                 p.get("forward (training=True)")),
                ("backward", p.get("forward + backward (no update)"), p.get("forward + loss")),
                ("Adam update + Keras step overhead", p.get("step, LS 0.1, no metrics"),
                 p.get("forward + backward (no update)")),
                ("the 3 metrics", full, p.get("step, LS 0.1, no metrics")),
                ("label smoothing vs plain CE", p.get("step, LS 0.1, no metrics"),
                 p.get("step, plain CE (LS 0), no metrics")),
            ]
            print("  derived (differences, noisy):")
            for name, a, b in parts:
                if a is not None and b is not None and full:
                    print(f"    {name:<46} {a - b:8.1f}  ({(a - b) / full:+.0%} of the full step)")
    if report.get("quick"):
        print("(--quick: a few steps only; numbers are a smoke test, not a measurement)")


def compute_ratios(runs) -> tuple:
    by = {(r["setting"], r["system"]): r for r in runs if "error" not in r}
    keys = ("tgt_tokens_per_s", "src_tgt_tokens_per_s", "pairs_per_s")
    ratios = {}
    for setting in SETTINGS:
        ours, base = by.get((setting, "ours")), by.get((setting, "baseline"))
        if ours and base:
            ratios[f"{setting} vs {setting}"] = {k: ours[k] / base[k] for k in keys}
        base32 = by.get(("fp32", "baseline"))
        if ours and base32 and setting != "fp32":
            ratios[f"{setting} vs fp32 baseline"] = {k: ours[k] / base32[k] for k in keys}
    # Baseline's own speed-up from the policy (the issue quotes 3,990 -> 7,990 tokens/s).
    for setting in ("bf16", "bf16_jit", "fp32_jit"):
        b, b32 = by.get((setting, "baseline")), by.get(("fp32", "baseline"))
        if b and b32:
            ratios[f"baseline {setting}/fp32"] = {k: b[k] / b32[k] for k in keys}

    def ratio(name, key="tgt_tokens_per_s"):
        return ratios.get(name, {}).get(key)

    bf16 = [v for v in (ratio("bf16 vs fp32 baseline"), ratio("bf16_jit vs fp32 baseline"))
            if v is not None]
    best_bf16 = max(bf16) if bf16 else None
    ours32 = by.get(("fp32", "ours"))
    targets = [
        {"name": "ours/baseline real tgt tokens/s, fp32", "value": ratio("fp32 vs fp32"),
         "target": ">= 2"},
        {"name": "ours bf16 (best of jit/no jit) / baseline fp32, real tgt tokens/s",
         "value": best_bf16, "target": ">= 4"},
        {"name": "ours fp32 executed GFLOP/s / fp32 matmul peak",
         "value": ours32["peak_share_executed"] if ours32 else None, "target": ">= 0.60"},
    ]
    for t, threshold in zip(targets, (2.0, 4.0, 0.6)):
        t["pass"] = t["value"] is not None and t["value"] >= threshold
    return ratios, targets


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=os.environ.get("KT_DATA_DIR",
                                                             str(REPO.parent / "shared" / "data")))
    parser.add_argument("--steps", type=int, default=30, help="timed steps per (setting, system)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--settings", default=",".join(SETTINGS),
                        help=f"comma list of {list(SETTINGS)}")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma list of ours,baseline")
    parser.add_argument("--baseline-tokenizer", choices=("wordpiece", "sentencepiece"),
                        default="wordpiece")
    parser.add_argument("--baseline-optimizer", default="rmsprop",
                        help="the recipe's rmsprop (default); e.g. adam to check the rmsprop+XLA "
                             "slowdown of the baseline's jit_compile step")
    parser.add_argument("--profile", default="fp32",
                        help="settings in which our step is also profiled (comma list, or none)")
    parser.add_argument("--profile-steps", type=int, default=10)
    parser.add_argument("--matmul-size", type=int, default=2048)
    parser.add_argument("--matmul-reps", type=int, default=5)
    parser.add_argument("--vocab-size", type=int, default=None,
                        help="our shared BPE vocabulary (default: data.vocab_size of "
                             "configs/multi30k.yaml, the BLEU recipe's)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(),
                                                            "kt_train_throughput"),
                        help="trained tokenizers are kept here between runs")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds per subprocess")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: 3 timed steps, 1 warm-up, small matmul, profile 2 steps")
    parser.add_argument("--output", help="also write everything as JSON here")
    parser.add_argument("--child", choices=("prepare", "measure"), help=argparse.SUPPRESS)
    parser.add_argument("--child-spec", help=argparse.SUPPRESS)
    parser.add_argument("--child-output", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.child:
        spec = json.loads(args.child_spec)
        result = child_prepare(spec) if args.child == "prepare" else child_measure(spec)
        pathlib.Path(args.child_output).write_text(json.dumps(result))
        return

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
    if args.steps < 1 or args.warmup < 1:
        parser.error("--steps and --warmup must be >= 1")
    profile = [] if args.profile in ("", "none") else [s.strip() for s in args.profile.split(",")]
    if not (pathlib.Path(args.data_dir) / "multi30k" / "train.en").exists():
        parser.error(f"{args.data_dir}/multi30k/train.en not found (set --data-dir or KT_DATA_DIR)")

    child_args = {k: getattr(args, k) for k in (
        "data_dir", "steps", "warmup", "baseline_tokenizer", "baseline_optimizer", "profile_steps",
        "matmul_size", "matmul_reps", "seed", "cache_dir", "vocab_size")}
    child_args["profile"] = profile
    report = {"cpu": _cpu_info(), "args": {**child_args, "settings": settings, "systems": systems},
              "quick": args.quick, "python": sys.version.split()[0], "runs": []}
    print(f"preparing tokenizers and epoch statistics (cache {args.cache_dir}) ...", flush=True)
    report["prepare"] = run_child("prepare", {"args": child_args}, args.timeout)
    if "error" in report["prepare"]:
        print(f"prepare failed: {report['prepare']['error']}")
        sys.exit(1)
    for setting in settings:
        for system in systems:
            print(f"--- {setting} / {system}", flush=True)
            result = run_child("measure", {"args": child_args, "setting": setting,
                                           "system": system}, args.timeout)
            result.setdefault("setting", setting)
            result.setdefault("system", system)
            report["runs"].append(result)
    report["ratios"], report["targets"] = compute_ratios(report["runs"])
    print_report(report)
    if args.output:
        pathlib.Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
