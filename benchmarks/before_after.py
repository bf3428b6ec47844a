"""Compares two checkouts of the library on the same weights: translations and decoding speed.

For a refactor: "nothing got slower or different". Make the old checkout with
``git worktree add ../old HEAD~1``, then::

    python -m benchmarks.before_after --old ../old --model RUN/model.keras \
        --tokenizer RUN/tokenizer --rounds 2 --output results/before_after.json

Each measurement runs in a fresh process per checkout (``PYTHONPATH`` set to that checkout),
alternating old and new ``--rounds`` times so that the machine's noise hits both alike:

* translations: greedy and beam 4 (alpha 0.6) ids of every sentence of ``--data`` (default:
  the 1,000 Multi30k test sentences) through ``keras_transformer.decoding``'s functional API
  (the same in both layouts); the report counts identical outputs and lists the others;
* speed: ``benchmarks/search/decoding.py`` of each checkout (greedy and beam, batch 1 and 64); the
  report gives each checkout's median sentences/s and the new/old ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]

# Runs inside a checkout: writes the ids of both searches to an .npz file.
_TRANSLATE = r"""
import sys, numpy as np, keras, tensorflow as tf
from keras_transformer import decoding
from keras_transformer.text.tokenizer import SubwordTokenizer, EOS_ID
model_path, tokenizer_path, data, output, batch = sys.argv[1:6]
model = keras.models.load_model(model_path, compile=False)
tokenizer = SubwordTokenizer.load(tokenizer_path)
lines = open(data, encoding="utf-8").read().splitlines()
results = {"greedy": [], "beam": []}
for start in range(0, len(lines), int(batch)):
    tokens = tokenizer.tokenize(tf.constant(lines[start:start + int(batch)]))
    # tokenization.with_eos by hand: the old checkout may not have it (max_positions 100 here)
    rows = [list(r[:99]) + [EOS_ID] for r in tokens.numpy()]
    width = max(len(r) for r in rows)
    source = np.array([r + [0] * (width - len(r)) for r in rows], np.int32)
    for name, (ids, _) in (("greedy", decoding.greedy_decode(model, source)),
                           ("beam", decoding.beam_search(model, source, beam_size=4, alpha=0.6))):
        results[name] += [[int(t) for t in row if t != 0] for row in ids.numpy()]
np.savez(output, **{k: np.array([" ".join(map(str, r)) for r in v]) for k, v in results.items()})
"""

_ROW = re.compile(r"^\s*(\d+)\s{2}(greedy cached|beam \d+ cached)\s+([\d.]+)\s")


def _run(checkout, args, env_extra=None):
    env = dict(os.environ, PYTHONPATH=str(checkout), TF_CPP_MIN_LOG_LEVEL="3", **(env_extra or {}))
    result = subprocess.run(args, cwd=checkout, env=env, capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"{checkout}: {' '.join(args[:3])} failed:\n{result.stderr[-3000:]}")
    return result.stdout


def translations(checkout, args, output):
    command = [
        sys.executable,
        "-c",
        _TRANSLATE,
        args.model,
        args.tokenizer,
        args.data,
        str(output),
        "64",
    ]
    _run(checkout, command)
    import numpy as np

    with np.load(output) as data:
        return {key: list(data[key]) for key in data.files}


def speeds(checkout, args):
    """sentences/s per (batch, search) from one ``benchmarks/search/decoding.py`` run."""
    moved = (pathlib.Path(checkout) / "benchmarks" / "search" / "decoding.py").exists()
    command = [
        sys.executable,
        *(["-m", "benchmarks.search.decoding"] if moved else ["benchmarks/decoding.py"]),
        "--model",
        args.model,
        "--tokenizer",
        args.tokenizer,
        "--data",
        args.data,
        "--batch-sizes",
        args.batch_sizes,
        "--no-uncached",
        "--keras-io-batch-sizes",
        "",
    ]
    if args.limit:
        command += ["--limit", str(args.limit)]
    rows = {}
    for line in _run(checkout, command).splitlines():
        match = _ROW.match(line)
        if match:
            rows[f"batch {match[1]}, {match[2]}"] = float(match[3])
    return rows


def compare_translations(old, new):
    report = {}
    for search in old:
        differ = [i for i, (a, b) in enumerate(zip(old[search], new[search])) if a != b]
        report[search] = {
            "sentences": len(old[search]),
            "identical": len(old[search]) - len(differ),
            "different": [
                {"line": i + 1, "old": old[search][i], "new": new[search][i]} for i in differ
            ],
        }
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    data_dir = pathlib.Path(os.environ.get("KT_DATA_DIR", REPO.parent / "shared" / "data"))
    parser.add_argument("--old", required=True, help="the other checkout (git worktree)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--data", default=str(data_dir / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--batch-sizes", default="1,64")
    parser.add_argument("--limit", type=int, help="sentences for the speed runs (default all)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip-translations", action="store_true")
    parser.add_argument("--output", help="JSON report")
    args = parser.parse_args(argv)
    old, new = pathlib.Path(args.old).resolve(), REPO
    report = {"old": str(old), "new": str(new), "model": args.model}
    if not args.skip_translations:
        with tempfile.TemporaryDirectory() as tmp:
            outputs = [
                translations(c, args, pathlib.Path(tmp) / f"{i}.npz")
                for i, c in enumerate((old, new))
            ]
        report["translations"] = compare_translations(*outputs)
        for search, result in report["translations"].items():
            print(f"{search}: {result['identical']} of {result['sentences']} identical", flush=True)
    runs = {"old": [], "new": []}
    for round_ in range(args.rounds):
        for name, checkout in (("old", old), ("new", new)):
            runs[name].append(speeds(checkout, args))
            print(f"round {round_ + 1} {name}: {runs[name][-1]}", flush=True)
    report["speed"] = {}
    for key in runs["old"][0] if runs["old"] else []:
        medians = {n: statistics.median(r[key] for r in runs[n]) for n in runs}
        report["speed"][key] = {
            **medians,
            "new/old": medians["new"] / medians["old"],
            "runs": {n: [r[key] for r in runs[n]] for n in runs},
        }
        print(
            f"{key}: old {medians['old']:.1f}, new {medians['new']:.1f} sentences/s, "
            f"new/old {medians['new'] / medians['old']:.3f}"
        )
    if args.output:
        pathlib.Path(args.output).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
