# Decoding speed for the paper's inference settings (section 6.1: beam size 4, alpha 0.6, maximum
# output length input length + 50): key/value-cached greedy and beam search against uncached
# greedy decoders that re-run the whole model on the whole prefix at every step.
"""Benchmark greedy and beam-search decoding on the Multi30k test set.

Usage::

    python -m benchmarks.search.decoding --limit 64  # quick: untrained `small`, 64 lines
    python -m benchmarks.search.decoding --model run/averaged.keras --tokenizer run/tokenizer \
        --keras-io-batch-sizes 64                             # keras.io decoder at batch 64 only
    python -m benchmarks.search.decoding                             # all 1,000 test sentences
    python -m benchmarks.search.decoding --xla  # also the XLA-compiled searches
    python -m benchmarks.search.decoding --model run/model.keras --tokenizer run/tokenizer
    python -m benchmarks.search.decoding --model saved_models/en_de  # an exported Translator
    python -m benchmarks.search.decoding --model run/averaged.keras --tokenizer run/tokenizer \
        --dtype bfloat16 --saved-model saved_models/greedy --saved-model saved_models/beam4

For every batch size (default 1 and 64) it times, in one run:

* ``keras.io greedy (uncached)``, trained models only: the decoder of the keras.io recipe that the
  issue's baseline used, applied to our model:
  eager ``keras_hub.samplers.GreedySampler``, source and prompt padded to 40 ids, the whole model
  re-run on both at every step. The recipe's ``decode_sequences`` translates one sentence per call;
  running it on a batch is our generalization (the sampler is batched). Slow at batch 1
  (``--keras-io-batch-sizes`` picks the batch sizes, '' for none);
* ``greedy uncached``: our graph-mode reference, the full model on the source and the whole
  prefix per step, in one ``tf.while_loop`` (no padding beyond the batch's longest source);
* ``greedy cached`` and ``beam K cached``: :class:`keras_transformer.inference.search.Searcher`;
* with ``--plain-loop``: the same two searches with ``drop_finished=False`` (every row runs to
  the end of its batch's longest search);
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
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]

import keras  # noqa: E402

from benchmarks.search.keras_io_decoder import (  # noqa: E402
    KERAS_IO_LENGTH,
    agreement,
    keras_io_greedy,
)
from keras_transformer import TransformerConfig, build_transformer, cast_model  # noqa: E402
from keras_transformer.inference.search import Searcher  # noqa: E402
from keras_transformer.model import model_dims  # noqa: E402
from keras_transformer.text.lines import read_lines  # noqa: E402
from keras_transformer.text.tokenizer import (  # noqa: E402
    PAD_ID,
    SubwordTokenizer,
    with_eos,
)
from tests.oracles.reference_decoding import NoEosSearcher, uncached_greedy_function  # noqa: E402


def default_data_file() -> pathlib.Path:
    data_dir = pathlib.Path(os.environ.get("KT_DATA_DIR", REPO.parent / "shared" / "data"))
    return data_dir / "multi30k" / "test_2016_flickr.en"


def source_batches(tokenizer, lines, batch_size, max_source_length):
    """Model inputs (subwords + EOS, truncated, 0-padded) in file order."""
    batches = []
    for start in range(0, len(lines), batch_size):
        tokens = tokenizer.tokenize(tf.constant(lines[start : start + batch_size]))
        batches.append(with_eos(tf.cast(tokens, tf.int32), max_source_length).to_tensor(PAD_ID))
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


def same_outputs(a, b):
    return len(a) == len(b) and all(
        x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a, b)
    )


HEADER = (
    f"{'batch':>5}  {'search':<26} {'sent/s':>9} {'tokens/s':>10}  {'vs uncached':>11}  "
    f"{'vs keras.io':>11}"
)


def report(batch_size, name, seconds, sentences, tokens, baseline=None, note="", keras_io=None):
    """One row; ``baseline``/``keras_io`` are the seconds of the two uncached references (None:
    this row is that reference, 0: not measured)."""

    def ratio(base):
        return f"{base / seconds:10.2f}x" if base else "       base" if base is None else ""

    print(
        f"{batch_size:>5}  {name:<26} {sentences / seconds:9.2f} {tokens / seconds:10.1f}  "
        f"{ratio(baseline):>11}  {ratio(keras_io):>11}  {note}",
        flush=True,
    )


def _searches(model, args, untrained):
    """``[(name, search)]``: our uncached reference, cached greedy and beam (and with XLA)."""
    settings = dict(max_extra_length=args.max_extra_length)
    searcher = NoEosSearcher if untrained else Searcher  # untrained: every output at full length
    greedy = searcher(model, beam_size=1, alpha=0.0, **settings)
    beam = searcher(model, beam_size=args.beam_size, alpha=args.alpha, **settings)
    searches = [
        ("greedy cached", greedy.greedy),
        (f"beam {args.beam_size} cached", beam.beam_search),
    ]
    if args.plain_loop:  # the loop over every row to the end (drop_finished=False)
        plain = dict(settings, drop_finished=False)
        greedy_plain = searcher(model, beam_size=1, alpha=0.0, **plain)
        beam_plain = searcher(model, beam_size=args.beam_size, alpha=args.alpha, **plain)
        searches += [("greedy cached, plain loop", greedy_plain.greedy)]
        searches += [(f"beam {args.beam_size} cached, plain loop", beam_plain.beam_search)]
    if not args.no_uncached:
        searches.insert(0, ("greedy uncached", uncached_greedy_function(greedy)))
    if args.xla:
        settings.update(jit_compile=True)
        greedy_xla = searcher(model, beam_size=1, alpha=0.0, **settings)
        beam_xla = searcher(model, beam_size=args.beam_size, alpha=args.alpha, **settings)
        searches += [
            ("greedy cached XLA", greedy_xla.greedy),
            (f"beam {args.beam_size} cached XLA", beam_xla.beam_search),
        ]
    return searches


def _time_keras_io(keras_io, tokenizer, lines, batch_size):
    """``(seconds, outputs)`` of the keras.io decoder over ``lines`` (after a warm-up)."""
    batches = source_batches(tokenizer, lines, batch_size, KERAS_IO_LENGTH)
    keras_io(batches[0][:2])  # warm-up (the sampler and the model run eagerly)
    seconds, sentences, tokens, outputs = time_search(keras_io, batches)
    report(batch_size, "keras.io greedy (uncached)", seconds, sentences, tokens, 0, keras_io=None)
    return seconds, outputs


def _notes(name, outputs, reference, keras_io_outputs, untrained):
    notes = []
    if name.startswith("greedy") and reference is not None:
        same = same_outputs(outputs, reference)
        notes.append("same tokens as uncached" if same else "DIFFERENT tokens from uncached")
    if name == "greedy cached" and keras_io_outputs is not None and not untrained:
        same, total = agreement(keras_io_outputs, outputs, KERAS_IO_LENGTH - 1)
        notes.append(
            f"keras.io decoder: same tokens for {same} of the {total} outputs "
            f"of at most {KERAS_IO_LENGTH - 1} subwords"
        )
    return notes


def benchmark_keras(model, tokenizer, lines, args, untrained):
    searches = _searches(model, args, untrained)
    max_source_length = args.max_source_length or model_dims(model)["max_positions"]
    timed_keras_io = set(args.keras_io_batch_sizes) & set(args.batch_sizes)
    keras_io = keras_io_greedy(model, stop=not untrained) if timed_keras_io else None
    print(HEADER)
    baselines = {}
    for batch_size in args.batch_sizes:
        batches = source_batches(tokenizer, lines, batch_size, max_source_length)
        baseline = reference = keras_io_seconds = keras_io_outputs = None
        if batch_size in args.keras_io_batch_sizes:
            keras_io_seconds, keras_io_outputs = _time_keras_io(
                keras_io, tokenizer, lines, batch_size
            )
        for name, search in searches:
            compile_note = []
            if "XLA" in name:  # compile every shape first
                compile_seconds = time_search(search, batches)[0]
                compile_note.append(f"(first pass with compilation {compile_seconds:.1f} s)")
            else:
                search(batches[0])  # trace
            seconds, sentences, tokens, outputs = time_search(search, batches)
            if name == "greedy uncached":
                baseline, reference = seconds, outputs
                io_seconds = keras_io_seconds or 0
                report(batch_size, name, seconds, sentences, tokens, None, keras_io=io_seconds)
                continue
            notes = _notes(name, outputs, reference, keras_io_outputs, untrained) + compile_note
            report(
                batch_size,
                name,
                seconds,
                sentences,
                tokens,
                baseline or 0,
                "; ".join(notes),
                keras_io=keras_io_seconds or 0,
            )
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
    print(
        f"exported model {path}: beam {settings.get('beam_size')}, alpha "
        f"{settings.get('alpha')}, dtype {settings.get('dtype', 'float32')}"
    )
    print(HEADER)
    baselines = baselines or {}
    for batch_size in args.batch_sizes:
        texts = [lines[i : i + batch_size] for i in range(0, len(lines), batch_size)]
        token_batches = [tokenize(text=tf.constant(t))["tokens"] for t in texts]
        ids = lambda tokens: (translate_tokens(tokens=tokens)["tokens"], None)  # noqa: E731
        ids(token_batches[0])
        seconds, sentences, tokens, _ = time_search(ids, token_batches)
        baseline, keras_io = baselines.get(batch_size, (0, 0))
        report(
            batch_size, "translate_tokens", seconds, sentences, tokens, baseline, keras_io=keras_io
        )
        serve(text=tf.constant(texts[0]))  # warm up, as for translate_tokens
        start = time.perf_counter()
        for t in texts:
            serve(text=tf.constant(t))["translation"].numpy()
        seconds = time.perf_counter() - start
        report(
            batch_size,
            "serving_default (text)",
            seconds,
            len(lines),
            tokens,
            baseline,
            keras_io=keras_io,
        )


def build_parser():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model",
        help=".keras model or exported SavedModel folder "
        "(default: an untrained `small` model, EOS disabled)",
    )
    parser.add_argument(
        "--tokenizer",
        help="SubwordTokenizer folder or .model (with a .keras "
        "model; default: train one on Multi30k train)",
    )
    parser.add_argument("--data", default=str(default_data_file()), help="one sentence a line")
    parser.add_argument("--limit", type=int, help="only the first N sentences (quick run)")
    parser.add_argument(
        "--batch-sizes", default="1,64", type=lambda s: [int(x) for x in s.split(",")]
    )
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument(
        "--max-extra-length", type=int, help="default 50 (paper), 0 for the untrained default model"
    )
    parser.add_argument(
        "--max-source-length",
        type=int,
        help="source subwords kept, EOS included (default: model positions)",
    )
    parser.add_argument("--preset", default="small", help="preset of the default model")
    parser.add_argument("--xla", action="store_true", help="also time the XLA-compiled searches")
    parser.add_argument("--no-uncached", action="store_true", help="skip the (slow) baseline")
    parser.add_argument("--plain-loop", action="store_true", help="also drop_finished=False")
    parser.add_argument(
        "--keras-io-batch-sizes",
        default=None,
        type=lambda s: [int(x) for x in s.split(",") if x],
        help="batch sizes at which to time the keras.io recipe's decoder "
        "(default: all of --batch-sizes with a trained --model, none for the "
        "untrained default model; '' for none)",
    )
    parser.add_argument(
        "--dtype",
        default=None,
        help="cast the .keras model to this Keras dtype policy (e.g. bfloat16)",
    )
    parser.add_argument(
        "--saved-model",
        action="append",
        default=[],
        help="also time this exported Translator (repeatable)",
    )
    return parser


def load_model_and_tokenizer(args, parser):
    """The model to time (a trained ``.keras`` or an untrained preset) and its tokenizer."""
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
        print(
            f"model: UNTRAINED {args.preset} (N={config.num_layers}, d_model={config.d_model}, "
            f"h={config.num_heads}, d_ff={config.d_ff}, vocab {config.source_vocab_size}, "
            f"{model.count_params():,} parameters); EOS disabled: each output has "
            f"source length + {args.max_extra_length} subwords"
        )
    else:
        model = keras.models.load_model(args.model, compile=False)
        if args.max_extra_length is None:
            args.max_extra_length = 50
        print(f"model: {args.model} ({model.count_params():,} parameters)")
    if args.dtype:
        model = cast_model(model, args.dtype)
    return model, tokenizer, untrained


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)

    if args.keras_io_batch_sizes is None:
        args.keras_io_batch_sizes = args.batch_sizes if args.model else []
    lines = read_lines(args.data, args.limit)
    print(
        f"data: {args.data}, {len(lines)} sentences; TF {tf.__version__}, "
        f"{os.cpu_count()} CPUs, GPUs: {len(tf.config.list_physical_devices('GPU'))}"
    )

    if args.model and (pathlib.Path(args.model) / "saved_model.pb").is_file():
        print(f"model: exported SavedModel {args.model}")
        benchmark_saved_model(args.model, lines, args)
        return

    model, tokenizer, untrained = load_model_and_tokenizer(args, parser)
    print(
        f"beam size {args.beam_size}, alpha {args.alpha}, max extra length "
        f"{args.max_extra_length}, dtype {model_dims(model)['dtype_policy']}; "
        "tokens/s counts emitted subwords (EOS included)"
    )
    baselines = benchmark_keras(model, tokenizer, lines, args, untrained)
    for path in args.saved_model:
        benchmark_saved_model(path, lines, args, baselines)


if __name__ == "__main__":
    main()
