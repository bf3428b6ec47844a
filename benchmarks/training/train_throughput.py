# Training throughput (paper section 5.2 reports training cost; section 5.1 batches by length): real
# tokens per second and the share of the measured matmul peak, for our model against a keras-hub
# baseline of the same size, each with its natural input pipeline, in fp32 / bf16, with and without
# XLA.
"""Benchmark training throughput: keras_transformer vs a keras-hub baseline on Multi30k en->de.

Usage::

    python -m benchmarks.training.train_throughput                       # all 4 settings
    python -m benchmarks.training.train_throughput --quick               # smoke test, a few steps
    python -m benchmarks.training.train_throughput --settings fp32,bf16 --steps 40 --output tt.json
    # same token units
    python -m benchmarks.training.train_throughput --baseline-tokenizer sentencepiece

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
is per process); results are gathered into one table, so all numbers come from one run. The code
is in ``benchmarks/throughput/``, one module per job (its ``__init__`` lists them).

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

import os
import pathlib
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# keras-hub's sub-layers warn that they drop the mask; the Transformer layers still get it (checked:
# outputs at real positions do not change with the amount of padding).
warnings.filterwarnings("ignore", message=".*does not support masking.*")

REPO = pathlib.Path(__file__).resolve().parents[2]

from benchmarks.training.throughput.cli import main  # noqa: E402  (after sys.path)

if __name__ == "__main__":
    main(description=__doc__.splitlines()[0])
