"""BLEU against training time: each checkpoint of a run scored alone (no averaging), placed at the
training minutes of the epoch that wrote it (``history.csv``)."""

from __future__ import annotations

import csv
import pathlib
from collections.abc import Sequence

from keras_transformer.training.callbacks import checkpoint_step, list_checkpoints
from keras_transformer.training.run_config import TrainingConfig
from keras_transformer.training.run_dir import (
    CHECKPOINT_DIR,
    HISTORY_FILE,
    RUN_CONFIG,
    TOKENIZER_DIR,
    check_run_dir,
)

__all__ = ["bleu_curve", "checkpoint_at_minutes", "history"]

CURVE_COLUMNS = ["checkpoint", "train_minutes", "bleu", "chrf"]


def history(run_dir) -> list[dict]:
    """The rows of the run's ``history.csv`` (one per epoch), or ``[]`` before the first epoch."""
    path = pathlib.Path(run_dir) / HISTORY_FILE
    if not path.exists():
        return []
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def checkpoint_at_minutes(run_dir, rows: Sequence[dict], minutes: float):
    """``(path, train_minutes)`` of the checkpoint saved at the end of the last epoch finished
    within ``minutes`` of training, or ``None`` (no such epoch, or its checkpoint is gone)."""
    run_dir = pathlib.Path(run_dir)
    if not (run_dir / RUN_CONFIG).exists():
        return None
    steps_per_epoch = TrainingConfig.load(run_dir / RUN_CONFIG).training.steps_per_epoch
    done = [r for r in rows if float(r.get("train_minutes") or "inf") <= minutes]
    if not done:
        return None
    last = max(done, key=lambda r: int(r["epoch"]))
    step = (int(last["epoch"]) + 1) * steps_per_epoch
    for path in list_checkpoints(run_dir / CHECKPOINT_DIR):
        if checkpoint_step(path) == step:
            return path, float(last["train_minutes"])
    return None


def bleu_curve(
    run_dir,
    sources: Sequence[str],
    references: Sequence[str],
    output,
    dtype: str | None = None,
    **search,
) -> list[dict]:
    """Scores every kept checkpoint of a run alone and writes ``checkpoint, train_minutes, bleu,
    chrf`` rows to the CSV file ``output`` (flushed row by row); returns the rows.

    ``dtype`` decodes under that Keras dtype policy (``cast_model``, e.g. ``bfloat16``);
    ``search``: :class:`~keras_transformer.inference.settings.SearchSettings` fields (default:
    beam 4, alpha 0.6).
    """
    from keras_transformer.evaluation import score_translations, translate_sentences
    from keras_transformer.model import cast_model
    from keras_transformer.text.tokenizer import SubwordTokenizer
    from keras_transformer.training.loop import load_run_model

    run_dir = check_run_dir(run_dir)
    rows = history(run_dir)
    tokenizer = SubwordTokenizer.load(run_dir / TOKENIZER_DIR)
    output = pathlib.Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    written = []
    with open(output, "w", newline="") as handle:
        writer = csv.DictWriter(handle, CURVE_COLUMNS)
        writer.writeheader()
        for row in rows:
            found = checkpoint_at_minutes(run_dir, rows, float(row["train_minutes"]))
            if found is None:
                continue
            path, minutes = found
            model = load_run_model(run_dir, weights=path)
            if dtype:
                model = cast_model(model, dtype)
            hypotheses = translate_sentences(model, tokenizer, sources, **search)
            scores = score_translations(hypotheses, references)
            written.append(
                {
                    "checkpoint": path.name,
                    "train_minutes": f"{minutes:.2f}",
                    "bleu": f"{scores['bleu'].score:.2f}",
                    "chrf": f"{scores['chrf'].score:.2f}",
                }
            )
            writer.writerow(written[-1])
            handle.flush()
            print(f"{path.name}: {minutes:.1f} min, BLEU {scores['bleu'].score:.2f}", flush=True)
    print(f"Wrote {output}")
    return written
