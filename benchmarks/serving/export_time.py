"""How long an export takes, how large its graph is, and how often it traces each function.

Builds a model of a preset (untrained: tracing does not depend on the weights) and a tokenizer
trained on Multi30k, then times ``Translator.save`` in a fresh ``Translator`` per round and
prints the seconds, the size of ``saved_model.pb`` and the number of traces of each signature and
search function (1 each: every graph traced once and stored once), then loads the export back in
a fresh process and times that.

    KT_DATA_DIR=/work/shared/data python -m benchmarks.serving.export_time --preset tiny --rounds 2

To compare a change, run it alternately in the old checkout (``git worktree add ../old HEAD~1``)
and this one, each importing its own library::

    PYTHONPATH=../old python ../old/benchmarks/export_time.py --rounds 1   # the script copied there
    PYTHONPATH=. python -m benchmarks.serving.export_time --rounds 1
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = pathlib.Path(os.environ.get("KT_DATA_DIR", REPO.parent / "shared" / "data")) / "multi30k"
FUNCTIONS = ("translate", "translate_tokens", "translate_nbest", "translate_aligned", "tokenize")
LOAD = "import sys, time, tensorflow as tf, tensorflow_text; t = time.perf_counter(); " + (
    "tf.saved_model.load(sys.argv[1]); print(time.perf_counter() - t)"
)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="tiny", choices=["tiny", "small", "base"])
    p.add_argument("--vocab-size", type=int, default=1000)
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)

    import keras_transformer as kt
    from keras_transformer.inference.saved_model import Translator

    work = pathlib.Path(tempfile.mkdtemp(prefix="kt_export_time_"))
    files = [DATA / "train.en", DATA / "train.de"]
    tokenizer = kt.SubwordTokenizer.train(
        files, vocab_size=args.vocab_size, output_dir=work / "tok"
    )
    config = getattr(kt.TransformerConfig, args.preset)(vocab_size=tokenizer.vocab_size)
    model = kt.build_transformer(config)
    seconds, loads = [], []
    for round_ in range(args.rounds):
        translator = Translator(model, tokenizer, beam_size=args.beam_size)
        start = time.perf_counter()
        path = translator.save(work / f"export_{round_}")
        seconds.append(time.perf_counter() - start)
        traces = {
            name: getattr(translator, name).experimental_get_tracing_count() for name in FUNCTIONS
        }
        searcher = translator.searcher
        traces["searcher.search"] = searcher.search.experimental_get_tracing_count()
        traces["searcher.nbest"] = searcher.nbest.experimental_get_tracing_count()
        load = subprocess.run([sys.executable, "-c", LOAD, path], capture_output=True, text=True)
        loads.append(float(load.stdout.split()[-1]))
        size = os.path.getsize(pathlib.Path(path) / "saved_model.pb") / 1e6
        print(
            f"round {round_}: save {seconds[-1]:.1f} s, load {loads[-1]:.1f} s, "
            f"saved_model.pb {size:.2f} MB, traces {traces}",
            flush=True,
        )
    print(
        f"median save {statistics.median(seconds):.1f} s, load {statistics.median(loads):.1f} s "
        f"({args.preset}, vocab {tokenizer.vocab_size}, beam {args.beam_size})"
    )


if __name__ == "__main__":
    main()
