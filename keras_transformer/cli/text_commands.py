"""Subcommands on exported SavedModels: translate lines, evaluate on a test set."""

from __future__ import annotations

import pathlib
import sys
import time


def add_translate(commands, parent):
    p = commands.add_parser(
        "translate", parents=[parent], help="translate lines with an exported SavedModel"
    )
    p.add_argument(
        "--model", required=True, help="SavedModel folder from `keras-transformer export`"
    )
    p.add_argument("--input", default="-", help="file of sentences, one per line (default stdin)")
    p.add_argument("--output", default="-", help="output file (default stdout)")
    p.add_argument("--batch-size", type=int, default=64)
    p.set_defaults(func=_translate)


def _translate(args):
    from keras_transformer.cli.common import read_lines, require_saved_model

    require_saved_model(args.model)
    lines = read_lines(args.input)
    translations = translate_with_saved_model(
        args.model, lines, args.batch_size, progress=args.input != "-"
    )
    text = "".join(t + "\n" for t in translations)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        pathlib.Path(args.output).write_text(text, encoding="utf-8")


def translate_with_saved_model(model_dir, lines, batch_size=64, progress=False) -> list[str]:
    """Translates ``lines`` with an exported SavedModel's ``serving_default`` signature."""
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the SavedModel uses)

    from keras_transformer.quiet import dropping_noise

    with dropping_noise():
        serve = tf.saved_model.load(str(model_dir)).signatures["serving_default"]
    order = np.argsort([len(line) for line in lines], kind="stable")  # similar lengths together
    results = [""] * len(lines)
    batches = range(0, len(lines), batch_size)
    if progress:
        from tqdm import tqdm

        batches = tqdm(batches, desc="translating", unit="batch", file=sys.stderr)
    for start in batches:
        chunk = order[start : start + batch_size]
        out = serve(text=tf.constant([lines[i] for i in chunk]))["translation"].numpy()
        for i, text in zip(chunk, out, strict=True):
            results[i] = text.decode("utf-8")
    return results


def add_evaluate(commands, parent):
    p = commands.add_parser(
        "evaluate", parents=[parent], help="sacreBLEU and chrF of an exported model on a test set"
    )
    p.add_argument("--model", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lowercase", action="store_true", help="also print lowercased BLEU")
    p.add_argument("--output", default=None, help="write the translations to this file")
    p.set_defaults(func=_evaluate)


def _evaluate(args):
    from keras_transformer.cli.common import parallel_lines, require_saved_model
    from keras_transformer.evaluation import score_translations

    require_saved_model(args.model)
    sources, references = parallel_lines(args.src, args.ref)
    start = time.perf_counter()
    hypotheses = translate_with_saved_model(args.model, sources, args.batch_size, progress=True)
    seconds = time.perf_counter() - start
    if args.output:
        pathlib.Path(args.output).write_text(
            "".join(h + "\n" for h in hypotheses), encoding="utf-8"
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
