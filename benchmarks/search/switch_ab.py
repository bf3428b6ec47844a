"""One search switch on and off, in one process, in interleaved rounds: the speed ratio and the
outputs' equality.

Two :class:`keras_transformer.Translator` over the same weights differ only in the
settings given with ``--off`` (the plain form); each round translates the same sentences with
both, one after the other, so both see the same machine load. Text in, text out, as served.

    python -m benchmarks.search.switch_ab --run runs/multi30k_recipe \\
        --weights averaged --off share_cross_cache=false --beam-size 4 --batch 64 --rounds 3

Prints each round's sentences/s and ratio (on / off), the median ratio, and how many
translations are the same text.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
DATA = pathlib.Path(os.environ.get("KT_DATA_DIR", REPO.parent / "shared" / "data")) / "multi30k"


def _setting(text):
    key, _, value = text.partition("=")
    if not value:
        raise argparse.ArgumentTypeError(f"--off {text!r}: expected KEY=VALUE")
    try:  # true / false / numbers; anything else is a string (dtype=bfloat16)
        return key, json.loads(value.lower() if value.lower() in ("true", "false") else value)
    except json.JSONDecodeError:
        return key, value


def _translate_all(translator, lines, batch):
    import tensorflow as tf

    start, texts = time.perf_counter(), []
    for i in range(0, len(lines), batch):
        output = translator.translate(tf.constant(lines[i : i + batch]))
        texts += [t.decode("utf-8") for t in output["translation"].numpy()]
    return len(lines) / (time.perf_counter() - start), texts


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", default="runs/multi30k_recipe")
    p.add_argument("--weights", default=None, help="as export --weights (default: final model)")
    p.add_argument("--off", type=_setting, action="append", required=True, help="KEY=VALUE")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--sentences", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)

    import tensorflow as tf

    from keras_transformer.cli.run_commands import load_run
    from keras_transformer.inference.saved_model import Translator

    model, tokenizer = load_run(args.run, args.weights)
    lines = (DATA / "test_2016_flickr.en").read_text("utf-8").splitlines()[: args.sentences]
    common = dict(beam_size=args.beam_size, alpha=args.alpha)
    translators = {
        "on": Translator(model, tokenizer, **common),
        "off": Translator(model, tokenizer, **common, **dict(args.off)),
    }
    for translator in translators.values():  # trace both before timing
        translator.translate(tf.constant(lines[: args.batch]))
    ratios, texts = [], {}
    for round_ in range(args.rounds):
        speed = {}
        for name, translator in translators.items():
            speed[name], texts[name] = _translate_all(translator, lines, args.batch)
        ratios.append(speed["on"] / speed["off"])
        rates = {name: round(value, 1) for name, value in speed.items()}
        print(f"round {round_}: sentences/s {rates}, on / off {ratios[-1]:.3f}", flush=True)
    same = sum(a == b for a, b in zip(texts["on"], texts["off"]))
    print(f"median on / off {statistics.median(ratios):.3f}; same text {same}/{len(lines)}")


if __name__ == "__main__":
    main()
