# Decoding speed for the paper's inference settings (section 6.1: beam size 4, alpha 0.6, maximum
# output length input length + 50): key/value-cached greedy and beam search against uncached
# greedy decoders that re-run the whole model on the whole prefix at every step.
"""Benchmark greedy and beam-search decoding on the Multi30k test set.

Usage::

    python benchmarks/decoding.py --limit 64                  # quick: untrained `small`, 64 lines
    python benchmarks/decoding.py --model run/averaged.keras --tokenizer run/tokenizer \
        --keras-io-batch-sizes 64                             # keras.io decoder at batch 64 only
    python benchmarks/decoding.py                             # all 1,000 test sentences
    python benchmarks/decoding.py --xla                       # also the XLA-compiled searches
    python benchmarks/decoding.py --model run/model.keras --tokenizer run/tokenizer
    python benchmarks/decoding.py --model saved_models/en_de  # an exported Translator
    python benchmarks/decoding.py --model run/averaged.keras --tokenizer run/tokenizer \
        --dtype bfloat16 --saved-model saved_models/greedy --saved-model saved_models/beam4

For every batch size (default 1 and 64) it times, in one run:

* ``keras.io greedy (uncached)``, trained models only: the decoder of the keras.io recipe that the
  issue's baseline used (4.35 sentences/s at batch 64 with its own model), applied to our model:
  eager ``keras_hub.samplers.GreedySampler``, source and prompt padded to 40 ids, the whole model
  re-run on both at every step. The recipe's ``decode_sequences`` translates one sentence per call;
  running it on a batch is our generalization (the sampler is batched). Slow: about 40 minutes for
  the 1,000 sentences at batch 1 (``--keras-io-batch-sizes`` picks the batch sizes, '' for none);
* ``greedy uncached``: our graph-mode reference, the full model on the source and the whole
  prefix per step, in one ``tf.while_loop`` (no padding beyond the batch's longest source);
* ``greedy cached`` and ``beam K cached``: :class:`keras_transformer.decoding.Decoder`;
* with ``--xla``: the same two searches compiled with XLA (compilation is timed apart: a first,
  untimed pass over the data compiles every (batch size, source width bucket) shape);
* with ``--saved-model PATH`` (repeatable): exported Translators (``keras-transformer export``),
  timed through ``translate_tokens`` (ids in, ids out, as the searches above) and
  ``serving_default`` (text in, text out), against the same uncached decoders.

``--dtype bfloat16`` casts the ``.keras`` model (baseline included) with
:func:`keras_transformer.cast_model` first, as ``keras-transformer export --dtype`` does.

It prints sentences/s, output tokens/s (emitted subwords, EOS included) and the speed-up over each
uncached decoder at the same batch size; it checks that cached greedy emits exactly our uncached
decoder's tokens and counts the sentences on which it agrees with the keras.io decoder.
Sentences are batched in file order (no length sorting), padded to the longest of their batch.

Without ``--model`` it builds an **untrained** ``small`` model (N=3, d_model=256, h=4, d_ff=1024)
over a SentencePiece vocabulary trained on Multi30k train (8,000 ids, about a second). An
untrained model would stop at once or never, so the benchmark then **disables EOS** and sets
``--max-extra-length`` to 0 unless given: every output has exactly as many subwords as its source
(close to real Multi30k translation lengths), and all our searches do the same number of steps.
The keras.io decoder is then skipped (it would run its full 39 steps; ``--keras-io-batch-sizes``
forces it, with that caveat).

With an exported SavedModel (``--model`` a folder with ``saved_model.pb``) only its own search
(the settings it was exported with) can run: the benchmark times ``translate_tokens`` (ids in,
ids out) and ``serving_default`` (text in, text out), with no baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import keras  # noqa: E402

from keras_transformer import TransformerConfig, build_transformer, cast_model  # noqa: E402
from keras_transformer.decoding import Decoder  # noqa: E402
from keras_transformer.tokenization import BOS_ID, EOS_ID, PAD_ID, SubwordTokenizer  # noqa: E402


def default_data_file() -> pathlib.Path:
    data_dir = pathlib.Path(os.environ.get("KT_DATA_DIR", REPO.parent / "shared" / "data"))
    return data_dir / "multi30k" / "test_2016_flickr.en"


def read_lines(path, limit=None):
    lines = pathlib.Path(path).read_text(encoding="utf-8").splitlines()
    return lines[:limit] if limit else lines


def source_batches(tokenizer, lines, batch_size, max_source_length):
    """Model inputs (subwords + EOS, truncated, 0-padded) in file order."""
    batches = []
    for start in range(0, len(lines), batch_size):
        tokens = tokenizer.tokenize(tf.constant(lines[start:start + batch_size]))
        tokens = tokens[:, :max_source_length - 1]
        rows = [list(row) + [EOS_ID] for row in tokens.numpy()]
        width = max(len(row) for row in rows)
        batches.append(tf.constant([row + [PAD_ID] * (width - len(row)) for row in rows],
                                   tf.int32))
    return batches


def time_search(search, batches):
    """Runs ``search`` on every batch; returns (seconds, sentences, emitted tokens, outputs)."""
    outputs, sentences, tokens = [], 0, 0
    start = time.perf_counter()
    for source in batches:
        ids, _ = search(source)
        ids = ids.numpy()
        outputs.append(ids)
        sentences += ids.shape[0]
        tokens += int(np.count_nonzero(ids != PAD_ID))
    return time.perf_counter() - start, sentences, tokens, outputs


KERAS_IO_LENGTH = 40  # the keras.io recipe pads sources and prompts to MAX_SEQUENCE_LENGTH = 40


def keras_io_greedy(model, stop=True, length=KERAS_IO_LENGTH):
    """The keras.io recipe's decoder (``decode_sequences`` of "English-to-Spanish translation with
    KerasHub"), applied to our model: eager ``keras_hub.samplers.GreedySampler``, the source padded
    to ``length``, a ``[BOS, PAD, ...]`` prompt of ``length`` ids, and at every step the whole model
    re-run on the source and the whole padded prompt, keeping the logits at ``index - 1``. It stops
    when every sentence has emitted EOS (or after ``length - 1`` steps), so outputs are at most
    ``length - 1`` subwords long. Give it sources of at most ``length`` ids
    (``source_batches(..., max_source_length=length)`` cuts them, EOS kept last, as the model was
    trained). Returns ``search(source_ids) -> (ids, None)`` in our format (no BOS, up to and
    including the first EOS, 0-padded)."""
    import keras_hub

    sampler = keras_hub.samplers.GreedySampler()

    def search(source_ids):
        source = tf.pad(source_ids, [[0, 0], [0, length - tf.shape(source_ids)[1]]])
        batch = tf.shape(source)[0]
        prompt = tf.concat([tf.fill([batch, 1], BOS_ID), tf.fill([batch, length - 1], PAD_ID)],
                           axis=1)

        def next_logits(prompt, cache, index):  # the recipe's `next`
            logits = model({"source": source, "target": prompt}, training=False)[:, index - 1, :]
            return logits, None, cache

        generated = sampler(next_logits, prompt, index=1,
                            stop_token_ids=[EOS_ID] if stop else None).numpy()[:, 1:]
        eos = generated == EOS_ID
        after_eos = np.cumsum(eos, axis=1) - eos > 0  # what the recipe's post-processing drops
        width = max(1, int((~after_eos).sum(axis=1).max()))
        return tf.constant(np.where(after_eos, PAD_ID, generated)[:, :width]), None

    return search


def agreement(outputs, reference, longest):
    """How many sentences of ``outputs`` equal ``reference``'s, among those whose reference has at
    most ``longest`` subwords, EOS included (the keras.io decoder cannot emit more)."""
    same = total = 0
    for a, b in zip(outputs, reference):
        for x, y in zip(a, b):
            x, y = x[x != PAD_ID], y[y != PAD_ID]
            if len(y) <= longest:
                total += 1
                same += int(np.array_equal(x, y))
    return same, total


def same_outputs(a, b):
    return len(a) == len(b) and all(x.shape == y.shape and np.array_equal(x, y)
                                    for x, y in zip(a, b))


HEADER = (f"{'batch':>5}  {'search':<26} {'sent/s':>9} {'tokens/s':>10}  {'vs uncached':>11}  "
          f"{'vs keras.io':>11}")


def report(batch_size, name, seconds, sentences, tokens, baseline=None, note="", keras_io=None):
    """One row; ``baseline``/``keras_io`` are the seconds of the two uncached references (None:
    this row is that reference, 0: not measured)."""
    def ratio(base):
        return f"{base / seconds:10.2f}x" if base else "       base" if base is None else ""
    print(f"{batch_size:>5}  {name:<26} {sentences / seconds:9.2f} {tokens / seconds:10.1f}  "
          f"{ratio(baseline):>11}  {ratio(keras_io):>11}  {note}", flush=True)


def benchmark_keras(model, tokenizer, lines, args, untrained):
    settings = dict(max_extra_length=args.max_extra_length, disable_eos=untrained)
    greedy = Decoder(model, beam_size=1, alpha=0.0, **settings)
    beam = Decoder(model, beam_size=args.beam_size, alpha=args.alpha, **settings)
    searches = [("greedy uncached", greedy.greedy_uncached),
                ("greedy cached", greedy.greedy),
                (f"beam {args.beam_size} cached", beam.beam_search)]
    if args.xla:
        greedy_xla = Decoder(model, beam_size=1, alpha=0.0, jit_compile=True, **settings)
        beam_xla = Decoder(model, beam_size=args.beam_size, alpha=args.alpha, jit_compile=True,
                           **settings)
        searches += [("greedy cached XLA", greedy_xla.greedy),
                     (f"beam {args.beam_size} cached XLA", beam_xla.beam_search)]
    max_source_length = args.max_source_length or model.get_layer(
        "encoder_positional_encoding").max_length

    keras_io = (keras_io_greedy(model, stop=not untrained)
                if set(args.keras_io_batch_sizes) & set(args.batch_sizes) else None)
    print(HEADER)
    baselines = {}
    for batch_size in args.batch_sizes:
        batches = source_batches(tokenizer, lines, batch_size, max_source_length)
        baseline = reference = keras_io_seconds = keras_io_outputs = None
        if batch_size in args.keras_io_batch_sizes:
            keras_io_batches = source_batches(tokenizer, lines, batch_size, KERAS_IO_LENGTH)
            keras_io(keras_io_batches[0][:2])  # warm-up (the sampler and the model run eagerly)
            keras_io_seconds, sentences, tokens, keras_io_outputs = time_search(keras_io,
                                                                                keras_io_batches)
            report(batch_size, "keras.io greedy (uncached)", keras_io_seconds, sentences, tokens,
                   0, keras_io=None)
        for name, search in searches:
            if name == "greedy uncached" and args.no_uncached:
                continue
            notes = []
            if "XLA" in name:  # compile every shape first
                compile_seconds = time_search(search, batches)[0]
                notes.append(f"(first pass with compilation {compile_seconds:.1f} s)")
            else:
                search(batches[0])  # trace
            seconds, sentences, tokens, outputs = time_search(search, batches)
            if name == "greedy uncached":
                baseline, reference = seconds, outputs
                report(batch_size, name, seconds, sentences, tokens, None,
                       keras_io=keras_io_seconds or 0)
                continue
            if name.startswith("greedy") and reference is not None:
                notes.insert(0, "same tokens as uncached" if same_outputs(outputs, reference)
                             else "DIFFERENT tokens from uncached")
            if name == "greedy cached" and keras_io_outputs is not None and not untrained:
                same, total = agreement(keras_io_outputs, outputs, KERAS_IO_LENGTH - 1)
                notes.append(f"keras.io decoder: same tokens for {same} of the {total} outputs "
                             f"of at most {KERAS_IO_LENGTH - 1} subwords")
            report(batch_size, name, seconds, sentences, tokens, baseline or 0, "; ".join(notes),
                   keras_io=keras_io_seconds or 0)
        baselines[batch_size] = (baseline or 0, keras_io_seconds or 0)
    return baselines


def benchmark_saved_model(path, lines, args, baselines=None):
    """Times an exported Translator; ratios against ``baselines`` (batch size -> seconds of our
    uncached decoder, seconds of the keras.io decoder; 0 where not measured)."""
    import tensorflow_text  # noqa: F401  (SentencePiece ops of the exported tokenizer)

    loaded = tf.saved_model.load(str(path))
    translate_tokens = loaded.signatures["translate_tokens"]
    serve = loaded.signatures["serving_default"]
    tokenize = loaded.signatures["tokenize"]
    settings_file = pathlib.Path(path) / "assets.extra" / "translator.json"
    settings = json.loads(settings_file.read_text())["translator"] if settings_file.exists() else {}
    print(f"exported model {path}: beam {settings.get('beam_size')}, alpha "
          f"{settings.get('alpha')}, dtype {settings.get('dtype', 'float32')}")
    print(HEADER)
    baselines = baselines or {}
    for batch_size in args.batch_sizes:
        texts = [lines[i:i + batch_size] for i in range(0, len(lines), batch_size)]
        token_batches = [tokenize(text=tf.constant(t))["tokens"] for t in texts]
        ids = lambda tokens: (translate_tokens(tokens=tokens)["tokens"], None)  # noqa: E731
        ids(token_batches[0])
        seconds, sentences, tokens, _ = time_search(ids, token_batches)
        baseline, keras_io = baselines.get(batch_size, (0, 0))
        report(batch_size, "translate_tokens", seconds, sentences, tokens, baseline,
               keras_io=keras_io)
        serve(text=tf.constant(texts[0]))  # warm up, as for translate_tokens
        start = time.perf_counter()
        for t in texts:
            serve(text=tf.constant(t))["translation"].numpy()
        seconds = time.perf_counter() - start
        report(batch_size, "serving_default (text)", seconds, len(lines), tokens, baseline,
               keras_io=keras_io)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help=".keras model or exported SavedModel folder "
                        "(default: an untrained `small` model, EOS disabled)")
    parser.add_argument("--tokenizer", help="SubwordTokenizer folder or .model (with a .keras "
                        "model; default: train one on Multi30k train)")
    parser.add_argument("--data", default=str(default_data_file()), help="one sentence a line")
    parser.add_argument("--limit", type=int, help="only the first N sentences (quick run)")
    parser.add_argument("--batch-sizes", default="1,64",
                        type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--max-extra-length", type=int,
                        help="default 50 (paper), 0 for the untrained default model")
    parser.add_argument("--max-source-length", type=int,
                        help="source subwords kept, EOS included (default: model positions)")
    parser.add_argument("--preset", default="small", help="preset of the default model")
    parser.add_argument("--xla", action="store_true", help="also time the XLA-compiled searches")
    parser.add_argument("--no-uncached", action="store_true", help="skip the (slow) baseline")
    parser.add_argument("--keras-io-batch-sizes", default=None,
                        type=lambda s: [int(x) for x in s.split(",") if x],
                        help="batch sizes at which to time the keras.io recipe's decoder "
                        "(default: all of --batch-sizes with a trained --model, none for the "
                        "untrained default model; '' for none)")
    parser.add_argument("--dtype", default=None,
                        help="cast the .keras model to this Keras dtype policy (e.g. bfloat16)")
    parser.add_argument("--saved-model", action="append", default=[],
                        help="also time this exported Translator (repeatable)")
    args = parser.parse_args(argv)

    if args.keras_io_batch_sizes is None:
        args.keras_io_batch_sizes = args.batch_sizes if args.model else []
    lines = read_lines(args.data, args.limit)
    print(f"data: {args.data}, {len(lines)} sentences; TF {tf.__version__}, "
          f"{os.cpu_count()} CPUs, GPUs: {len(tf.config.list_physical_devices('GPU'))}")

    if args.model and (pathlib.Path(args.model) / "saved_model.pb").is_file():
        print(f"model: exported SavedModel {args.model}")
        benchmark_saved_model(args.model, lines, args)
        return

    untrained = args.model is None
    if args.tokenizer:
        tokenizer = SubwordTokenizer.load(args.tokenizer)
    else:
        if args.model:
            parser.error("--model with a .keras file needs --tokenizer")
        train = pathlib.Path(args.data).parent
        tokenizer = SubwordTokenizer.train([train / "train.en", train / "train.de"], 8000)
    if untrained:
        keras.utils.set_random_seed(0)
        config = TransformerConfig.preset(args.preset, tokenizer.vocab_size, dropout=0.0)
        model = build_transformer(config)
        if args.max_extra_length is None:
            args.max_extra_length = 0
        print(f"model: UNTRAINED {args.preset} (N={config.num_layers}, d_model={config.d_model}, "
              f"h={config.num_heads}, d_ff={config.d_ff}, vocab {config.source_vocab_size}, "
              f"{model.count_params():,} parameters); EOS disabled: each output has "
              f"source length + {args.max_extra_length} subwords")
    else:
        model = keras.models.load_model(args.model)
        if args.max_extra_length is None:
            args.max_extra_length = 50
        print(f"model: {args.model} ({model.count_params():,} parameters)")
    if args.dtype:
        model = cast_model(model, args.dtype)
    print(f"beam size {args.beam_size}, alpha {args.alpha}, max extra length "
          f"{args.max_extra_length}, dtype {model.get_layer('decoder_block_0').dtype_policy.name}; "
          "tokens/s counts emitted subwords (EOS included)")
    baselines = benchmark_keras(model, tokenizer, lines, args, untrained)
    for path in args.saved_model:
        benchmark_saved_model(path, lines, args, baselines)


if __name__ == "__main__":
    main()
