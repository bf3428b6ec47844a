"""Serving speed, quality and memory: our SavedModel against the CTranslate2 export, same weights.

Exports a run both ways (``keras-transformer export``), then translates the Multi30k test set
with each engine in a fresh process per measurement (so the peak RSS is that engine's alone):
batch 1 and 64, greedy and beam 4. Reports sentences/s, target subwords/s, sacreBLEU, peak RSS,
and the equality of the engines (greedy token equality, beam-4 BLEU difference, int8 vs
float32). ``--memory`` instead measures the peak RSS of one 10,000-sentence request against one
small batch (the SavedModel's sub-batches under ``max_batch_tokens``).

    python -m benchmarks.serving.serving --run runs/multi30k_serving --work /tmp/serving_bench \\
        --output results/serving.json
    python -m benchmarks.serving.serving --run runs/multi30k_serving --work /tmp/serving_bench \\
        --memory

The search switches have exports of their own (``API_EXPORTS``, through the Python API):
``saved_{fp32,bf16}_plain_{greedy,beam4}`` (``PLAIN_SEARCH``) and ``..._xla_...``
(``xla_max_batch=1``); the report's ``switches`` gives each against its plain export and
CTranslate2 float32 in the same run (``results/serving.md``).

Timings on a shared CPU vary: read them as ratios between rows of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import time

REPO = pathlib.Path(__file__).resolve().parents[2]

from benchmarks.serving_report import equality, median, switch_ratios  # noqa: E402

DATA = pathlib.Path(os.environ.get("KT_DATA_DIR", REPO.parent / "shared" / "data")) / "multi30k"
# name -> export flags (SavedModels decode as exported; CTranslate2 takes the beam at run time)
EXPORTS = {
    "saved_fp32_beam4": ["--dtype", "float32", "--beam-size", "4"],  # --max-batch-tokens 4096
    "saved_fp32_greedy": ["--dtype", "float32", "--beam-size", "1"],
    "saved_bf16_beam4": ["--dtype", "bfloat16", "--beam-size", "4"],
    "saved_fp32_beam4_unbounded": "--dtype float32 --beam-size 4 --max-batch-tokens 0".split(),
    "saved_bf16_greedy": ["--dtype", "bfloat16", "--beam-size", "1"],
    "ct2_float32": ["--format", "ctranslate2", "--quantization", "float32"],
    "ct2_int16": ["--format", "ctranslate2", "--quantization", "int16"],
    "ct2_int8": ["--format", "ctranslate2", "--quantization", "int8"],
}


# The search without its speed switches (each tested equal to it): finished sentences stay in
# the batch, and every beam hypothesis has its own copy of the cross-attention keys/values.
PLAIN_SEARCH = {"drop_finished": False, "share_cross_cache": False}
# name -> Translator settings, exported through the Python API (the search's speed switches:
# "plain" is the search before them; "xla" adds the XLA search of single sentences, measured at
# batch 1 only: larger batches run the default export's search)
API_EXPORTS = {
    f"saved_{dtype}_{kind}_{search}": dict(
        dtype={"fp32": "float32", "bf16": "bfloat16"}[dtype],
        beam_size=4 if search == "beam4" else 1,
        **(PLAIN_SEARCH if kind == "plain" else {"xla_max_batch": 1}),
    )
    for dtype in ("fp32", "bf16")
    for kind in ("plain", "xla")
    for search in ("greedy", "beam4")
}


def _api_export(run, path, settings, weights=None):
    from keras_transformer.cli.run_commands import load_run
    from keras_transformer.inference.saved_model import export_translator

    model, tokenizer = load_run(run, weights)
    export_translator(model, tokenizer, path, **settings)


def _cli(*args):
    command = [str(pathlib.Path(sys.executable).with_name("keras-transformer")), *map(str, args)]
    subprocess.run(command, check=True, cwd=REPO)


def export_all(run, work, names, weights=None, alpha=None):
    """Exports the run once per name in ``EXPORTS`` (kept if already there); ``alpha``: the
    length penalty of every export (default: the run's ``search.alpha``, else 0.6); a kept
    export of another ``alpha`` is refused (use another ``--work``)."""
    for name in names:
        _check_kept(work / name, alpha)
        if name in API_EXPORTS and not (work / name).exists():
            settings = {**API_EXPORTS[name], **({} if alpha is None else {"alpha": alpha})}
            _api_export(run, work / name, settings, weights)
        elif not (work / name).exists():
            extra = ["--weights", weights] if weights else []
            extra += ["--alpha", str(alpha)] if alpha is not None else []
            _cli("export", "--run", run, "--output", work / name, *EXPORTS[name], *extra)


def _check_kept(folder, alpha):
    """Refuses a kept export of another length penalty (its folder's name does not say)."""
    if alpha is None or not folder.exists():
        return
    # here, not at the top: the package loads TensorFlow, which the bare CTranslate2 row must not
    from keras_transformer.inference.formats import (
        CTRANSLATE2_SETTINGS,
        SAVED_MODEL_SETTINGS,
        check_export,
    )

    ct2 = check_export(folder) == "ctranslate2"
    settings = folder / (CTRANSLATE2_SETTINGS if ct2 else SAVED_MODEL_SETTINGS)
    kept = json.loads(settings.read_text())["translator"]["alpha"]
    if kept != alpha:
        raise SystemExit(f"{folder}: exported with alpha {kept}, not {alpha}: use a new --work")


def _warm_up(lines, encode, bucket=16):
    """What a server translates before taking requests: the first 8 lines, then one line of
    every source width bucket of ``lines`` (subwords + EOS, in XLA's buckets of 16), so that each
    engine has traced (and our XLA search compiled) every shape the timed pass meets."""
    chosen, buckets = list(lines[:8]), set()
    for line in lines:
        width = -(-(len(encode(line)) + 1) // bucket)
        if width not in buckets:
            buckets.add(width)
            chosen.append(line)
    return chosen


def peak_rss_gb() -> float:
    """This process's peak resident set: Linux's VmHWM, which starts afresh at ``exec``.
    (``ru_maxrss`` does not: a worker reported the driver's peak, once the driver had loaded
    TensorFlow for an API export, as every row's.)"""
    status = pathlib.Path("/proc/self/status")
    if status.exists():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024**2  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2


def _translator(job: dict):
    """``(translate(lines) -> texts, encode(text) -> ids)`` of the job's engine. ``bare``:
    CTranslate2 and SentencePiece alone, no TensorFlow in the process (what a server that only
    serves the folder holds), beam 4 with CTranslate2's own length penalty, inputs cut to 127
    subwords (Multi30k lines are clean text)."""
    import sentencepiece as spm

    path = pathlib.Path(job["model"])
    if job.get("bare"):
        import ctranslate2

        processor = spm.SentencePieceProcessor(model_file=str(path / "sentencepiece.model"))
        engine = ctranslate2.Translator(
            str(path), intra_threads=job["threads"], inter_threads=max(1, job.get("parallel", 0))
        )

        def translate(lines):
            pieces = [processor.encode(line, out_type=str)[:127] for line in lines]
            results = engine.translate_batch(
                pieces, max_batch_size=job["batch"], beam_size=job["beam"], length_penalty=0.6
            )
            return [processor.decode(r.hypotheses[0]) for r in results]

        return translate, processor.encode
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from keras_transformer.inference.formats import load_translator

    # threads per batch; batches at once (0: one at a time, either engine)
    options = {"intra_threads": job["threads"], "inter_threads": job.get("parallel", 0)}
    translator = load_translator(path, **options)
    run = {} if job["beam"] is None else {"beam_size": job["beam"], **job.get("options", {})}
    processor = spm.SentencePieceProcessor(model_file=job["spm"])
    return lambda lines: translator.translate(lines, job["batch"], **run), processor.encode


def worker(job: dict) -> dict:
    """One measurement in this process: load, warm up (not the bare engine), translate, count."""
    translate, encode = _translator(job)
    lines = pathlib.Path(job["source"]).read_text(encoding="utf-8").splitlines()[: job["n"]]
    start = time.perf_counter()
    if not job.get("bare"):
        translate(_warm_up(lines, encode))  # tracing, XLA
    warm_up_seconds = time.perf_counter() - start
    start = time.perf_counter()
    hypotheses = translate(lines)
    seconds = time.perf_counter() - start
    pathlib.Path(job["hypotheses"]).write_text("".join(h + "\n" for h in hypotheses), "utf-8")
    tokens = sum(len(encode(h)) + 1 for h in hypotheses)  # EOS counted
    return dict(
        warm_up_seconds=warm_up_seconds,
        seconds=seconds,
        sentences_per_s=len(lines) / seconds,
        tokens_per_s=tokens / seconds,
        peak_rss_gb=peak_rss_gb(),
    )


def _measure(job: dict) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.serving.serving", "--worker", json.dumps(job)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    )
    if out.returncode:
        raise RuntimeError(f"{job}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _bleu(path, references):
    import sacrebleu

    hypotheses = pathlib.Path(path).read_text(encoding="utf-8").splitlines()
    return sacrebleu.corpus_bleu(hypotheses, [references[: len(hypotheses)]]).score


def _rows(names, sizes):
    """(label, export, beam at run time, batch, sentences) for every measurement."""
    for batch, n in sizes:
        for beam in (1, 4):
            for name in names:
                if "_xla_" in name and batch > 1:
                    continue
                if name.startswith("saved"):
                    if name.endswith("greedy" if beam == 1 else "beam4"):
                        yield f"{name.rsplit('_', 1)[0]} beam {beam}", name, None, batch, n
                else:
                    yield f"{name} beam {beam}", name, beam, batch, n


def _job(args, model, source, n, batch, hypotheses, beam=None, **extra) -> dict:
    """One measurement's settings, for :func:`worker` in a fresh process."""
    return dict(
        model=str(model),
        source=str(source),
        n=n,
        beam=beam,
        batch=batch,
        threads=args.threads,
        parallel=getattr(args, "parallel", 0),
        hypotheses=str(hypotheses),
        **extra,
    )


def _summary(passes: list[dict], references) -> dict:
    """One row from its rounds: the median speeds, the largest peak RSS, BLEU of the output
    (the same in every round), and each round's sentences/s."""
    speeds = ("seconds", "sentences_per_s", "tokens_per_s", "warm_up_seconds")
    row = {key: median([p[key] for p in passes]) for key in speeds}
    row.update(
        peak_rss_gb=max(p["peak_rss_gb"] for p in passes),
        rounds=[p["sentences_per_s"] for p in passes],
    )
    row["bleu"] = _bleu(passes[-1]["hypotheses"], references)
    row["hypotheses"] = passes[-1]["hypotheses"]
    return row


def benchmark(args, work, names) -> list[dict]:
    """Every row once per round, the rows of a round one after another, so that each round's
    ratios compare engines measured minutes apart (a shared machine's load moves slowly)."""
    references = (DATA / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    source, spm_file = DATA / "test_2016_flickr.en", work / "ct2_float32" / "sentencepiece.model"
    jobs = {}
    sizes = [(64, args.sentences), (1, args.batch1_sentences)]
    for label, name, beam, batch, n in _rows(names, sizes):
        hyp = work / f"{label.replace(' ', '_')}_b{batch}.txt"
        jobs[label, batch] = _job(args, work / name, source, n, batch, hyp, beam, spm=str(spm_file))
    bare = work / "ct2_float32_bare_b64.txt"
    label = "ct2_float32 beam 4, no TensorFlow"
    jobs[label, 64] = _job(
        args, work / "ct2_float32", source, args.sentences, 64, bare, 4, bare=True
    )
    passes = {key: [] for key in jobs}
    for round_ in range(args.rounds):
        for (label, batch), job in jobs.items():
            measured = dict(_measure(job), hypotheses=job["hypotheses"])
            passes[label, batch].append(measured)
            print(json.dumps(dict(engine=label, batch=batch, round=round_, **measured)), flush=True)
    return [
        dict(
            engine=label, batch=batch, sentences=jobs[label, batch]["n"], **_summary(p, references)
        )
        for (label, batch), p in passes.items()
    ]


def memory(args, work) -> list[dict]:
    """Peak RSS of one 10,000-sentence request against one batch of 64 (beam 4)."""
    name = args.memory_export
    export_all(args.run, work, [name], args.weights, args.alpha)
    spm = work / name / "assets" / "sentencepiece.model"
    spm = spm if spm.exists() else work / "ct2_float32" / "sentencepiece.model"
    source, rows = DATA / "train.en", []
    for n, batch in ((64, 64), (args.memory_sentences, args.memory_sentences)):
        hypotheses = work / f"memory_{n}.txt"
        job = _job(args, work / name, source, n, batch, hypotheses, spm=str(spm))
        row = dict(request_sentences=n, **_measure(job))
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def length_penalties(args, work) -> dict:
    """Validation BLEU of beam 4 under each length penalty: ours (GNMT, SavedModel), CTranslate2's
    own (``len ** alpha``), and CTranslate2's k finished hypotheses re-ranked by GNMT."""
    export_all(args.run, work, ["saved_fp32_beam4", "ct2_float32"], args.weights, args.alpha)
    source = DATA / "val.en"
    references = (DATA / "val.de").read_text(encoding="utf-8").splitlines()
    n = len(references)
    rows, texts = {}, {}
    for label, name, extra in (
        ("saved_gnmt", "saved_fp32_beam4", {}),
        ("ct2_gnmt_rerank", "ct2_float32", {"length_penalty": "gnmt"}),
        ("ct2_own", "ct2_float32", {"length_penalty": "ctranslate2"}),
    ):
        hyp = work / f"val_{label}.txt"
        spm = str(work / "ct2_float32" / "sentencepiece.model")
        beam = 4 if extra else None
        job = _job(args, work / name, source, n, 64, hyp, beam, spm=spm, options=extra)
        rows[label] = dict(**_measure(job), bleu=_bleu(hyp, references))
        texts[label] = hyp.read_text(encoding="utf-8").splitlines()
        print(label, json.dumps(rows[label]), flush=True)
    for label in ("ct2_gnmt_rerank", "ct2_own"):
        same = sum(a == b for a, b in zip(texts[label], texts["saved_gnmt"]))
        rows[label]["same_as_saved"] = f"{same}/{n}"
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", default="runs/multi30k_serving")
    p.add_argument("--weights", default=None, help="export --weights (default: the final model)")
    p.add_argument("--alpha", type=float, default=None, help="export --alpha (default: the run's)")
    p.add_argument("--work", default="/tmp/serving_bench", help="exports and hypotheses")
    p.add_argument("--sentences", type=int, default=1000, help="batch-64 measurements")
    p.add_argument("--batch1-sentences", type=int, default=200, help="batch-1 measurements")
    p.add_argument(
        "--threads",
        type=int,
        default=2,
        help="threads per batch, either engine: CTranslate2's intra_threads, TensorFlow's "
        "intra-op pool",
    )
    p.add_argument(
        "--parallel",
        type=int,
        default=0,
        help="batches at once, either engine: CTranslate2's inter_threads, concurrent "
        "SavedModel calls and TensorFlow's inter-op pool (0: one batch at a time, "
        "TensorFlow's default pool)",
    )
    p.add_argument("--rounds", type=int, default=1, help="passes over every row, interleaved")
    speed = [name for name in EXPORTS if not name.endswith("unbounded")]
    p.add_argument("--engines", nargs="+", default=speed, choices=speed + list(API_EXPORTS))
    p.add_argument("--memory", action="store_true", help="the 10,000-sentence request instead")
    p.add_argument("--memory-sentences", type=int, default=10000)
    p.add_argument("--memory-export", default="saved_fp32_beam4", choices=list(EXPORTS))
    p.add_argument(
        "--length-penalty", action="store_true", help="validation BLEU under each length penalty"
    )
    p.add_argument("--output", default=None, help="JSON file of the results")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        job = json.loads(args.worker)
        print(json.dumps(worker(job)))
        return
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    if args.memory:
        report = dict(memory=memory(args, work))
    elif args.length_penalty:
        report = dict(length_penalty=length_penalties(args, work))
    else:
        export_all(args.run, work, ["ct2_float32", *args.engines], args.weights, args.alpha)
        results = benchmark(args, work, args.engines)
        report = dict(results=results)
        if {"saved_fp32_greedy", "saved_fp32_beam4", "ct2_int8", "ct2_int16"} <= set(args.engines):
            report["equality"] = equality(work, results)
        report["switches"] = switch_ratios(results)
    report["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    report["command"] = " ".join(["python -m benchmarks.serving.serving", *(argv or sys.argv[1:])])
    print(json.dumps(report, indent=1))
    if args.output:
        pathlib.Path(args.output).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
