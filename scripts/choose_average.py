"""Chooses how many of a run's last checkpoints to average, by validation BLEU (greedy decoding),
then writes RUN/averaged.keras with the best choice. Tuning happens on validation data only.

    python scripts/choose_average.py --run runs/multi30k --src VAL.en --ref VAL.de --candidates 1 2 3 5
"""

import argparse
import json
import pathlib
import tempfile


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--candidates", type=int, nargs="+", default=[1, 2, 3, 5])
    parser.add_argument("--beam-size", type=int, default=1)
    args = parser.parse_args(argv)

    from keras_transformer.evaluation import corpus_bleu, read_lines, translate_sentences
    from keras_transformer.tokenization import SubwordTokenizer
    from keras_transformer.training import average_checkpoints

    run = pathlib.Path(args.run)
    tokenizer = SubwordTokenizer.load(run / "tokenizer")
    sources, references = read_lines(args.src), read_lines(args.ref)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for last in args.candidates:
            model = average_checkpoints(run, last=last, output=pathlib.Path(tmp) / f"avg{last}.keras")
            hypotheses = translate_sentences(model, tokenizer, sources, beam_size=args.beam_size)
            results[last] = corpus_bleu(hypotheses, references).score
            print(f"last {last}: validation BLEU {results[last]:.2f}", flush=True)
    best = max(results, key=results.get)
    average_checkpoints(run, last=best)
    (run / "average_choice.json").write_text(json.dumps(
        {"validation_bleu_by_last_n": results, "chosen_last_n": best, "beam_size": args.beam_size}, indent=2))
    print(f"chosen: average of the last {best} checkpoints -> {run / 'averaged.keras'}")


if __name__ == "__main__":
    main()
