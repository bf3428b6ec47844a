"""The ``keras-transformer`` console script: train, average, export, translate, evaluate, attention."""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time


def _add_train(commands):
    p = commands.add_parser("train", help="train (or resume) a model with model.fit",
                            description="Train or resume a run. Overrides look like training.max_steps=200.")
    p.add_argument("--config", required=True, help="training config (YAML or JSON), e.g. configs/multi30k.yaml")
    p.add_argument("--run", default=None, help="run directory (default runs/<config name>); resumes if it exists")
    p.add_argument("overrides", nargs="*", help="section.field=value overrides")
    p.set_defaults(func=_train)


def _train(args):
    from keras_transformer.training import TrainingConfig, train

    config = TrainingConfig.load(args.config, args.overrides)
    run = args.run or os.path.join("runs", pathlib.Path(args.config).stem)
    start = time.perf_counter()
    train(config, run)
    print(f"Run finished in {(time.perf_counter() - start) / 60:.1f} min: {run}")


def _add_average(commands):
    p = commands.add_parser("average", help="average the last N checkpoints of a run (paper section 6.1)")
    p.add_argument("--run", required=True)
    p.add_argument("--last", type=int, default=5)
    p.add_argument("--output", default=None, help="output .keras file (default RUN/averaged.keras)")
    p.set_defaults(func=lambda a: __import__("keras_transformer.training", fromlist=["x"])
                   .average_checkpoints(a.run, a.last, a.output))


def _add_export(commands):
    p = commands.add_parser("export", help="export a run as a SavedModel that translates raw text")
    p.add_argument("--run", required=True)
    p.add_argument("--output", required=True, help="e.g. saved_models/multi30k_en_de")
    p.add_argument("--weights", default=None,
                   help="'averaged' (RUN/averaged.keras), a .keras or .weights.h5 file; default: final model")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--max-extra-length", type=int, default=50)
    p.add_argument("--dtype", default=None,
                   help="serve under this Keras dtype policy, e.g. bfloat16 (faster on CPUs with "
                        "AVX512-BF16 and recent GPUs); default: the model's own")
    p.set_defaults(func=_export)


def load_run(run, weights=None):
    """The model and tokenizer of a run directory; ``weights`` as for ``export --weights``."""
    import keras

    from keras_transformer.tokenization import SubwordTokenizer
    from keras_transformer.training import TOKENIZER_DIR, load_run_model

    run = pathlib.Path(run)
    if weights == "averaged":
        weights = run / "averaged.keras"
    if weights is not None and str(weights).endswith(".keras"):
        model = keras.models.load_model(weights, compile=False)
    else:
        model = load_run_model(run, weights=weights)
    return model, SubwordTokenizer.load(run / TOKENIZER_DIR)


def _export(args):
    from keras_transformer.export import export_translator

    model, tokenizer = load_run(args.run, args.weights)
    export_translator(model, tokenizer, args.output, beam_size=args.beam_size, alpha=args.alpha,
                      max_extra_length=args.max_extra_length, dtype=args.dtype)
    print(f"Exported to {args.output}")


def _add_translate(commands):
    p = commands.add_parser("translate", help="translate lines with an exported SavedModel")
    p.add_argument("--model", required=True, help="SavedModel folder from `keras-transformer export`")
    p.add_argument("--input", default="-", help="file of sentences, one per line (default stdin)")
    p.add_argument("--output", default="-", help="output file (default stdout)")
    p.add_argument("--batch-size", type=int, default=64)
    p.set_defaults(func=_translate)


def read_lines(path) -> list[str]:
    """Lines of ``path`` (``-`` is stdin); bad files end the command with a message naming them."""
    from keras_transformer.evaluation import read_lines as read_file_lines

    if path == "-":
        return [line.rstrip("\n") for line in sys.stdin]
    try:
        return read_file_lines(path)
    except UnicodeDecodeError as error:
        raise SystemExit(f"{path}: not UTF-8 text ({error})")
    except FileNotFoundError:
        raise SystemExit(f"{path}: no such file")


def translate_with_saved_model(model_dir, lines, batch_size=64, progress=False) -> list[str]:
    """Translates ``lines`` with an exported SavedModel's ``serving_default`` signature."""
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops the SavedModel uses)

    serve = tf.saved_model.load(str(model_dir)).signatures["serving_default"]
    order = np.argsort([len(line) for line in lines], kind="stable")  # similar lengths together
    results = [""] * len(lines)
    batches = range(0, len(lines), batch_size)
    if progress:
        from tqdm import tqdm

        batches = tqdm(batches, desc="translating", unit="batch", file=sys.stderr)
    for start in batches:
        chunk = order[start:start + batch_size]
        out = serve(text=tf.constant([lines[i] for i in chunk]))["translation"].numpy()
        for i, text in zip(chunk, out):
            results[i] = text.decode("utf-8")
    return results


def _translate(args):
    lines = read_lines(args.input)
    translations = translate_with_saved_model(args.model, lines, args.batch_size,
                                              progress=args.input != "-")
    text = "".join(t + "\n" for t in translations)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        pathlib.Path(args.output).write_text(text, encoding="utf-8")


def _add_evaluate(commands):
    p = commands.add_parser("evaluate", help="sacreBLEU and chrF of an exported model on a test set")
    p.add_argument("--model", required=True)
    p.add_argument("--src", required=True)
    p.add_argument("--ref", required=True)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lowercase", action="store_true", help="also print lowercased BLEU")
    p.add_argument("--output", default=None, help="write the translations to this file")
    p.set_defaults(func=_evaluate)


def _evaluate(args):
    from keras_transformer.evaluation import score_translations

    sources, references = read_lines(args.src), read_lines(args.ref)
    if len(sources) != len(references):
        raise SystemExit(f"{args.src} has {len(sources)} lines but {args.ref} has {len(references)}")
    start = time.perf_counter()
    hypotheses = translate_with_saved_model(args.model, sources, args.batch_size, progress=True)
    seconds = time.perf_counter() - start
    if args.output:
        pathlib.Path(args.output).write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    scores = score_translations(hypotheses, references, lowercase=args.lowercase)
    print(f"BLEU = {scores['bleu'].score:.2f}  {scores['bleu_signature']}")
    print(f"     {scores['bleu']}")
    print(f"chrF = {scores['chrf'].score:.2f}  {scores['chrf_signature']}")
    if args.lowercase:
        print(f"BLEU (lowercased) = {scores['bleu_lowercase'].score:.2f}  "
              f"{scores['bleu_lowercase_signature']}")
    print(f"{len(sources)} sentences in {seconds:.1f} s ({len(sources) / seconds:.2f} sentences/s)")


def _add_attention(commands):
    p = commands.add_parser("attention", help="plot the attention weights of one sentence")
    p.add_argument("--run", required=True, help="run directory (model and tokenizer)")
    p.add_argument("--weights", default=None)
    p.add_argument("--text", required=True)
    p.add_argument("--layer", type=int, default=-1)
    p.add_argument("--output", required=True, help="PNG file")
    p.set_defaults(func=_attention)


def _attention(args):
    from keras_transformer import plotting

    model, tokenizer = load_run(args.run, args.weights)
    plotting.plot_sentence_attention(model, tokenizer, args.text, layer=args.layer, output=args.output)
    print(f"Wrote {args.output}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="keras-transformer", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    for add in (_add_train, _add_average, _add_export, _add_translate, _add_evaluate, _add_attention):
        add(commands)
    return parser


def main(argv=None):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    args = build_parser().parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
