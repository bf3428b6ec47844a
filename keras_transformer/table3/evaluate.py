# Paper section 6.2 / Table 3: each variation scored on the development set by per-subword
# perplexity and BLEU (the paper: newstest2013, beam 4; here: the base config's validation split).
"""Scores one finished row of an ablation on the WHOLE validation split of its run: perplexity
(``exp`` of the mean unsmoothed per-subword cross-entropy, the ``Perplexity`` metric of
training), sacreBLEU of greedy (or beam) translations with ``translate_sentences``, the
parameter count, training minutes and updates. The final weights (``model.keras``) are scored,
without checkpoint averaging."""

from __future__ import annotations

import gc
import json
import pathlib

from keras_transformer.training.run_config import TrainingConfig, data_path
from keras_transformer.training.run_dir import FINISHED_FILE, RUN_CONFIG, TOKENIZER_DIR

__all__ = ["evaluate_run", "validation_perplexity"]

TIME_FILE = "time_spent.json"  # written by the run's TimeBudget callback at each epoch end


def validation_perplexity(model, tokenizer, pairs, max_sentence_length: int, tokens_per_batch=4096):
    """``(perplexity, target tokens, pairs scored)`` of ``model`` on ``pairs`` (a dataset of
    string pairs), teacher-forced in token-budget batches; pairs longer than
    ``max_sentence_length`` subwords (the model's positional table) cannot be scored and are
    left out (the count says how many were scored)."""
    from keras_transformer import data as kt_data
    from keras_transformer.metrics import Perplexity

    batches = kt_data.make_dataset(
        pairs,
        tokenizer,
        tokens_per_batch=max(tokens_per_batch, max_sentence_length),
        max_sentence_length=max_sentence_length,
        shuffle=False,
    )
    metric = Perplexity(jit_compile=False)  # one XLA compile per batch shape would dominate
    scored = 0
    for inputs, labels in batches:
        metric.update_state(labels, model(inputs, training=False))
        scored += int(labels.shape[0])
    return float(metric.result()), float(metric.count.numpy()), scored


def evaluate_run(run_dir, beam_size: int = 1, batch_size: int = 64) -> dict:
    """The scores of a finished run directory on its config's validation split (see the
    module docstring); ``beam_size`` 1 is greedy decoding."""
    import keras

    from keras_transformer import data as kt_data
    from keras_transformer.evaluation import corpus_bleu, translate_sentences
    from keras_transformer.model import model_dims
    from keras_transformer.quiet import dropping_noise
    from keras_transformer.text.lines import read_lines
    from keras_transformer.text.tokenizer import SubwordTokenizer
    from keras_transformer.training.loop import load_run_model

    run_dir = pathlib.Path(run_dir)
    config = TrainingConfig.load(run_dir / RUN_CONFIG)
    source, target = config.data.validation_source, config.data.validation_target
    if not (source and target):
        raise ValueError(f"{run_dir}: the config has no validation_source/validation_target")
    model = load_run_model(run_dir)
    with dropping_noise():  # SentencePiece's start-up lines
        tokenizer = SubwordTokenizer.load(run_dir / TOKENIZER_DIR)
    sources, references = read_lines(data_path(source)), read_lines(data_path(target))
    pairs = kt_data.read_parallel_text(data_path(source), data_path(target))
    perplexity, tokens, scored = validation_perplexity(
        model,
        tokenizer,
        pairs,
        model_dims(model)["max_positions"],
        config.data.tokens_per_batch,
    )
    hypotheses = translate_sentences(
        model, tokenizer, sources, beam_size=beam_size, batch_size=batch_size
    )
    result = {
        "params": int(model.count_params()),
        "val_perplexity": perplexity,
        "val_bleu": corpus_bleu(hypotheses, references).score,
        "val_sentences": len(sources),
        "val_pairs_scored": scored,
        "val_tokens": int(tokens),
        "decoding": "greedy" if beam_size == 1 else f"beam {beam_size}",
        **_run_budget(run_dir),
    }
    del model
    keras.backend.clear_session()
    gc.collect()
    return result


def _run_budget(run_dir: pathlib.Path) -> dict:
    """Training minutes (the run's own clock, over all its attempts) and updates."""
    seconds = json.loads((run_dir / TIME_FILE).read_text())["seconds"]
    updates = json.loads((run_dir / FINISHED_FILE).read_text())["steps"]
    return {"minutes": float(seconds) / 60.0, "updates": int(updates)}
