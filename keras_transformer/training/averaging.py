"""Checkpoint averaging (section 6.1: "the last 5 checkpoints" for base models, 20 for big ones),
and choosing how many to average by BLEU on validation data."""

from __future__ import annotations

import json
import pathlib
import tempfile
from collections.abc import Sequence

import keras
import numpy as np

from keras_transformer.training.backup import save_whole
from keras_transformer.training.callbacks import list_checkpoints
from keras_transformer.training.loop import load_run_model
from keras_transformer.training.run_dir import (
    AVERAGED_FILE,
    CHECKPOINT_DIR,
    TOKENIZER_DIR,
    check_run_dir,
)

__all__ = ["AVERAGE_CHOICE_FILE", "AVERAGED_FILE", "average_checkpoints", "choose_average"]

AVERAGE_CHOICE_FILE = "average_choice.json"  # validation BLEU of each candidate, and the choice


def average_checkpoints(run_dir, last: int = 5, output=None) -> keras.Model:
    """Averages the weights of the last ``last`` checkpoints into a new model.

    Writes ``averaged.keras`` in the run directory unless ``output`` says otherwise.
    """
    run_dir = pathlib.Path(run_dir)
    checkpoints = list_checkpoints(run_dir / CHECKPOINT_DIR)
    if not checkpoints:
        raise FileNotFoundError(f"{run_dir / CHECKPOINT_DIR}: no checkpoints to average")
    if last < 1:
        raise ValueError(f"--last must be >= 1, got {last}")
    chosen = checkpoints[-last:]
    model = load_run_model(run_dir, weights=chosen[0])
    total = [np.asarray(w, dtype=np.float64) for w in model.get_weights()]
    for path in chosen[1:]:
        model.load_weights(path)
        total = [t + w for t, w in zip(total, model.get_weights(), strict=True)]
    model.set_weights(
        [(t / len(chosen)).astype(w.dtype) for t, w in zip(total, model.get_weights(), strict=True)]
    )
    output = pathlib.Path(output) if output else run_dir / AVERAGED_FILE
    save_whole(model, output)
    print(f"Averaged {len(chosen)} checkpoints ({chosen[0].name} .. {chosen[-1].name}) -> {output}")
    return model


def choose_average(
    run_dir,
    sources: Sequence[str],
    references: Sequence[str],
    candidates: Sequence[int] = (1, 2, 3, 5),
    beam_size: int = 1,
) -> int:
    """Picks how many of the last checkpoints to average by corpus BLEU on validation data.

    Each candidate average is decoded (greedy by default) on ``sources`` and scored with
    sacreBLEU against ``references``; the best one is written to ``RUN/averaged.keras`` and the
    scores to ``RUN/average_choice.json``. Returns the chosen number. Tune on validation data
    only: the test set stays unseen.
    """
    from keras_transformer.evaluation import corpus_bleu, translate_sentences
    from keras_transformer.text.tokenizer import SubwordTokenizer

    run_dir = check_run_dir(run_dir)
    if not candidates:
        raise ValueError("choose_average: give at least one candidate number of checkpoints")
    if len(sources) != len(references):
        raise ValueError(f"choose_average: {len(sources)} sources but {len(references)} references")
    tokenizer = SubwordTokenizer.load(run_dir / TOKENIZER_DIR)
    scores = {}
    with tempfile.TemporaryDirectory() as tmp:
        for last in candidates:
            model = average_checkpoints(
                run_dir, last=last, output=pathlib.Path(tmp) / f"avg{last}.keras"
            )
            hypotheses = translate_sentences(model, tokenizer, sources, beam_size=beam_size)
            scores[last] = corpus_bleu(hypotheses, references).score
            print(f"last {last}: validation BLEU {scores[last]:.2f}", flush=True)
    best = max(scores, key=scores.get)
    average_checkpoints(run_dir, last=best)
    (run_dir / AVERAGE_CHOICE_FILE).write_text(
        json.dumps(
            {"validation_bleu_by_last_n": scores, "chosen_last_n": best, "beam_size": beam_size},
            indent=2,
        )
    )
    print(f"chosen: average of the last {best} checkpoints -> {run_dir / AVERAGED_FILE}")
    return best
