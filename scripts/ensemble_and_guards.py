"""Issue 44's measurements through the commands a user types: ensembles, the repetition guard
and sampling, on Multi30k en->de val and test_2016_flickr.

Every row is ``keras-transformer export`` then ``keras-transformer evaluate`` (or ``translate``)
in fresh processes under ``/usr/bin/time -v`` (peak RSS of the decoding process).

    python scripts/ensemble_and_guards.py --runs runs/ens/m1 runs/ens/m2 --weights averaged \\
        --output results/ensemble_multi30k

writes OUTPUT.json (every number, the command, date and CPU).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

from keras_transformer.machine import cpu_model

KT = [sys.executable, "-m", "keras_transformer.cli"]


def _run(args, timed=False) -> tuple[str, float | None]:
    """stdout of a command, and with ``timed`` its peak RSS in MB (``/usr/bin/time -v``)."""
    command = (["/usr/bin/time", "-v"] if timed else []) + [str(a) for a in args]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", result.stderr)
    return result.stdout, int(rss[1]) / 1024 if rss else None


def _evaluate(model, src, ref, threads, output=None) -> dict:
    args = [*KT, "evaluate", "--model", model, "--src", src, "--ref", ref, "--threads", threads]
    printed, rss = _run(args + (["--output", output] if output else []), timed=True)
    bleu = float(re.search(r"^BLEU = ([0-9.]+)", printed, re.M)[1])
    rate = float(re.search(r"\(([0-9.]+) sentences/s\)", printed)[1])
    return {"bleu": bleu, "sentences_per_second": rate, "peak_rss_mb": round(rss, 1)}


def _export(folder, run, weights, *flags):
    if not pathlib.Path(folder).exists():
        chosen = [] if weights == "final" else ["--weights", weights]
        _run([*KT, "export", "--run", run, *chosen, "--output", folder, *flags])
    return folder


def _repeats(tokenizer, text, n) -> bool:
    ids = tokenizer.encode(text)
    grams = [tuple(ids[j : j + n]) for j in range(len(ids) - n + 1)]
    return len(grams) != len(set(grams))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", nargs="+", required=True, help="runs of one tokenizer")
    p.add_argument("--weights", default="averaged", help="averaged, final, or a weights file")
    p.add_argument("--data", default=os.environ.get("KT_DATA_DIR", "../shared/data"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--exports", default=None, help="folder for the exports (default: a temp)")
    p.add_argument("--output", required=True, help="results/NAME: writes NAME.json and NAME.md")
    p.add_argument("--ensembles-only", action="store_true", help="skip the guard and sampling rows")
    args = p.parse_args(argv)
    data = pathlib.Path(args.data) / "multi30k"
    sets = {
        "val": (data / "val.en", data / "val.de"),
        "test": (data / "test_2016_flickr.en", data / "test_2016_flickr.de"),
    }
    exports = pathlib.Path(args.exports or tempfile.mkdtemp(prefix="kt_features_"))
    exports.mkdir(parents=True, exist_ok=True)
    first, rest = args.runs[0], args.runs[1:]
    rows, commands = [], []

    def row(name, folder, kind, **extra):
        for split, (src, ref) in sets.items():
            measured = _evaluate(folder, src, ref, args.threads)
            rows.append({"row": name, "kind": kind, "split": split, **extra, **measured})
            print(json.dumps(rows[-1]), flush=True)

    # Ensembles: each member alone, then all of them, both ways of averaging.
    for i, run in enumerate(args.runs):
        row(f"member {i + 1}", _export(exports / f"m{i}", run, args.weights), "ensemble", run=run)
    for average in ("log_probs", "probs"):
        folder = _export(exports / f"ens_{average}", first, args.weights, "--ensemble", *rest,
                         "--ensemble-average", average)  # fmt: skip
        row(f"ensemble of {len(args.runs)} ({average})", folder, "ensemble", average=average)
    commands.append(f"export --run {first} --weights {args.weights} --ensemble {' '.join(rest)}")
    if not args.ensembles_only:
        _guards_and_sampling(args, sets, exports, rows)
    _write(args, rows)


def _guards_and_sampling(args, sets, exports, rows):
    first = args.runs[0]

    # The repetition guard on the first member, beam 4: lines changed, and where.
    from keras_transformer.text.tokenizer import SubwordTokenizer

    tokenizer = SubwordTokenizer.load(pathlib.Path(first) / "tokenizer")
    src, ref = sets["test"]
    texts = {}
    for n in (0, 2, 3, 4):
        folder = _export(exports / f"guard{n}", first, args.weights, "--no-repeat-ngram-size", n)
        out = exports / f"guard{n}.de"
        measured = _evaluate(folder, src, ref, args.threads, output=out)
        texts[n] = out.read_text(encoding="utf-8").splitlines()
        entry = {"row": f"no_repeat_ngram_size {n}", "kind": "guard", "split": "test", **measured}
        if n:
            repeating = [_repeats(tokenizer, t, n) for t in texts[0]]
            changed = [a != b for a, b in zip(texts[0], texts[n], strict=True)]
            entry.update(
                lines_repeating_without_guard=sum(repeating),
                lines_changed=sum(changed),
                changed_among_not_repeating=sum(c for c, r in zip(changed, repeating) if not r),
            )
        rows.append(entry)
        print(json.dumps(entry), flush=True)

    # Sampling (the first member): BLEU of one sample per line, and two seeds' agreement.
    from keras_transformer.evaluation import corpus_bleu

    src, ref = sets["val"]
    references = ref.read_text(encoding="utf-8").splitlines()
    folder = exports / "m0"
    for topk, topp, temperature in ((10, 1.0, 1.0), (0, 0.9, 1.0), (0, 1.0, 1.0)):
        samples = []
        for seed in (1, 2):
            flags = ["--sampling-topk", topk, "--sampling-topp", topp]
            flags += ["--sampling-temperature", temperature, "--seed", seed]
            printed, _ = _run([*KT, "translate", "--model", folder, "--input", src, *flags])
            samples.append(printed.splitlines())
        entry = {
            "row": f"sampling topk {topk} topp {topp} T {temperature}",
            "kind": "sampling",
            "split": "val",
            "bleu": round(corpus_bleu(samples[0], references).score, 2),
            "same_line_two_seeds": sum(a == b for a, b in zip(*samples, strict=True)),
            "lines": len(references),
        }
        rows.append(entry)
        print(json.dumps(entry), flush=True)


def _write(args, rows):
    record = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "command": " ".join(["python", *sys.argv]),
        "threads": args.threads,
        "runs": args.runs,
        "weights": args.weights,
        "rows": rows,
    }
    output = pathlib.Path(args.output)
    output.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {output.with_suffix('.json')}")


if __name__ == "__main__":
    main()
