"""Subcommands on exported models: translate lines, evaluate on a test set.

``--model`` is either export of ``keras-transformer export``: a SavedModel folder or a CTranslate2
folder (``--format ctranslate2``); both translate the same way (``keras_transformer.inference``).
"""

from __future__ import annotations

import pathlib
import sys
import time
from typing import NamedTuple


def _at_least(least, hint=""):
    """An argparse type: an int >= ``least``."""

    def parse(text):
        import argparse

        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be >= {least}{hint}, got {value}")
        return value

    return parse


_positive = _at_least(1)
_threads = _at_least(0, " (0: the engine's default)")


def _model_options(p):
    p.add_argument(
        "--model",
        required=True,
        help="SavedModel or CTranslate2 folder from `keras-transformer export`",
    )
    p.add_argument("--batch-size", type=_positive, default=64)
    p.add_argument(
        "--beam-size",
        type=_positive,
        default=None,
        help="CTranslate2 folders only (a SavedModel decodes as exported): default the export's",
    )
    p.add_argument(
        "--compute-type",
        default="default",
        help="CTranslate2 folders only: int8, int16, float32, ... (default: the stored type)",
    )
    from keras_transformer.inference.settings import SAMPLING_FIELDS, SearchSettings, add_flags

    add_flags(p, SearchSettings, "the export", names=SAMPLING_FIELDS)
    p.add_argument(
        "--threads",
        type=_threads,
        default=0,
        help="threads per batch (0: the engine's default): CTranslate2's intra-op threads, or "
        "TensorFlow's intra-op pool (without --parallel, then also one inter-op thread)",
    )
    p.add_argument(
        "--parallel",
        type=_threads,
        default=0,
        help="batches translated at once (CTranslate2's inter_threads; a SavedModel's "
        "concurrent calls and inter-op pool); e.g. --threads 1 --parallel 2 on two cores",
    )


def add_translate(commands, parent):
    p = commands.add_parser(
        "translate", parents=[parent], help="translate lines with an exported model"
    )
    _model_options(p)
    p.add_argument("--input", default="-", help="file of sentences, one per line (default stdin)")
    p.add_argument("--output", default="-", help="output file (default stdout)")
    p.add_argument(
        "--n-best",
        type=_positive,
        default=1,
        help="print the N best translations of each line as 'LINE ||| SCORE ||| TEXT' "
        "(N <= the beam size); when sampling, N samples of each line",
    )
    p.add_argument(
        "--alignments",
        action="store_true",
        help="print 'TEXT ||| S-T ...': for each target subword T (from 0) the source subword S "
        "it attends most (last layer's encoder-decoder attention, heads averaged)",
    )
    p.set_defaults(check=_check_translate, func=_translate)


def _check_model(args):
    """``"saved_model"`` or ``"ctranslate2"`` for ``args.model``, or a ``CommandError``."""
    from keras_transformer.cli.common import CommandError
    from keras_transformer.inference.formats import NotAnExportError, check_export

    try:
        kind = check_export(args.model)
    except NotAnExportError as error:
        raise CommandError(str(error)) from error
    if kind == "saved_model" and (args.beam_size is not None or args.compute_type != "default"):
        raise CommandError(
            f"{args.model}: --beam-size and --compute-type go with CTranslate2 folders; a "
            "SavedModel decodes as it was exported (export it again with --beam-size)"
        )
    return kind


def _open_model(kind, args):
    from keras_transformer.cli.common import CommandError
    from keras_transformer.inference.formats import load_translator

    options = dict(intra_threads=args.threads, inter_threads=args.parallel)
    if kind == "ctranslate2":
        try:
            import ctranslate2  # noqa: F401
        except ImportError as error:
            raise CommandError(
                f"{args.model} is a CTranslate2 model: pip install 'keras-transformer[ctranslate2]'"
            ) from error
        options["compute_type"] = args.compute_type
    return load_translator(args.model, **options)


def _lines(path):
    from keras_transformer.cli.common import CommandError, read_lines

    lines = read_lines(path)
    if not lines:
        raise CommandError(f"{'stdin' if path == '-' else path}: no lines to translate")
    return lines


def _sampling(args) -> dict:
    """The sampling flags given (``inference/settings.py``'s SAMPLING_FIELDS)."""
    from keras_transformer.inference.settings import SAMPLING_FIELDS, SearchSettings, given_flags

    given = given_flags(args, SearchSettings)
    return {name: value for name, value in given.items() if name in SAMPLING_FIELDS}


def _samples_asked(translator, args) -> bool:
    """Whether this request samples (its flags, else the export's settings)."""
    from keras_transformer.cli.common import CommandError
    from keras_transformer.inference.settings import sampling_request

    try:
        sampling = sampling_request(translator.settings, **_sampling(args)).sampling
    except ValueError as error:
        raise CommandError(str(error)) from error
    if sampling and args.beam_size not in (None, 1):
        raise CommandError(f"--beam-size {args.beam_size}: sampling takes beam size 1")
    return sampling


def _beam(kind, args) -> dict:
    """The beam size of the flags for a CTranslate2 folder (a SavedModel decodes as exported)."""
    return {} if kind == "saved_model" else {"beam_size": args.beam_size}


class _Request(NamedTuple):
    """What the flags ask of the translator: the translate call's ``options`` (the sampling
    flags when it ``samples``, else the beam size) and ``n_best``, the translations of each line."""

    options: dict
    samples: bool
    n_best: int


def _request(kind, translator, args) -> _Request:
    samples = _samples_asked(translator, args)
    options = _sampling(args) if samples else _beam(kind, args)
    return _Request(options, samples, getattr(args, "n_best", 1))  # evaluate: no --n-best


def _one_line(text: str) -> str:
    """A translation as one output line: a line break a model emitted (a byte piece) becomes
    a space, so that line i of the output is always the translation of line i."""
    return " ".join(text.splitlines())  # every break str.splitlines knows (\x0b, \u2028, ...)


def _run_translation(kind, translator, args, lines, progress):
    options = _request(kind, translator, args).options
    return translator.translate(lines, args.batch_size, progress=progress, **options)


def _rows(kind, translator, args, lines):
    """The output lines of ``translate``: translations, n-best rows or aligned rows."""
    from keras_transformer.cli.common import CommandError

    if args.n_best > 1:
        request = _request(kind, translator, args)
        search = (
            translator.translate_samples if request.samples else translator.translate_hypotheses
        )
        try:
            found = search(lines, request.n_best, batch_size=args.batch_size, **request.options)
        except ValueError as error:
            raise CommandError(str(error)) from error
        return [
            f"{i} ||| {h.score:.4f} ||| {_one_line(h.text)}\n"
            for i, hypotheses in enumerate(found)
            for h in hypotheses
        ]
    if args.alignments:
        if _request(kind, translator, args).samples:
            raise CommandError(
                "--alignments come from the beam search, not from sampling: drop the "
                "--sampling-* flags (or translate with an export that does not sample)"
            )
        found = translator.translate_aligned(lines, args.batch_size, **_beam(kind, args))
        pairs = [" ".join(f"{s}-{t}" for t, s in enumerate(h.alignment)) for h in found]
        return [f"{_one_line(h.text)} ||| {p}\n" for h, p in zip(found, pairs, strict=True)]
    progress = args.input != "-"
    return [_one_line(t) + "\n" for t in _run_translation(kind, translator, args, lines, progress)]


def _check_translate(args) -> dict:
    """Before TensorFlow: the export folder and the input lines."""
    return {"kind": _check_model(args), "lines": _lines(args.input)}


def _translate(args, kind, lines):
    rows = _rows(kind, _open_model(kind, args), args, lines)
    if args.output == "-":
        sys.stdout.write("".join(rows))
    else:
        pathlib.Path(args.output).write_text("".join(rows), encoding="utf-8")


def add_evaluate(commands, parent):
    p = commands.add_parser(
        "evaluate", parents=[parent], help="sacreBLEU and chrF of an exported model on a test set"
    )
    _model_options(p)
    p.add_argument("--src", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--lowercase", action="store_true", help="also print lowercased BLEU")
    p.add_argument("--output", default=None, help="write the translations to this file")
    p.set_defaults(check=_check_evaluate, func=_evaluate)


def _check_evaluate(args) -> dict:
    """Before TensorFlow: the export folder, and sources and references of the same length."""
    from keras_transformer.cli.common import CommandError, parallel_lines

    kind = _check_model(args)
    sources, references = parallel_lines(args.src, args.ref)
    if not sources:
        raise CommandError(f"{args.src}: no lines to translate")
    return {"kind": kind, "sources": sources, "references": references}


def _evaluate(args, kind, sources, references):
    from keras_transformer.evaluation import score_translations

    translator = _open_model(kind, args)
    start = time.perf_counter()
    hypotheses = _run_translation(kind, translator, args, sources, progress=True)
    seconds = time.perf_counter() - start
    if args.output:
        pathlib.Path(args.output).write_text(
            "".join(_one_line(h) + "\n" for h in hypotheses), encoding="utf-8"
        )
    scores = score_translations(hypotheses, references, lowercase=args.lowercase)
    print(f"BLEU = {scores['bleu'].score:.2f}  {scores['bleu_signature']}")
    print(f"     {scores['bleu']}")
    print(f"chrF = {scores['chrf'].score:.2f}  {scores['chrf_signature']}")
    if args.lowercase:
        print(
            f"BLEU (lowercased) = {scores['bleu_lowercase'].score:.2f}  "
            f"{scores['bleu_lowercase_signature']}"
        )
    print(f"{len(sources)} sentences in {seconds:.1f} s ({len(sources) / seconds:.2f} sentences/s)")
