"""What ``benchmarks/serving/serving.py`` reports beside its rows: engine equality, and each row's
speed against CTranslate2 float32 and against the plain search, in the same run."""

from __future__ import annotations

import json
import pathlib


def median(values):
    values = sorted(values)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def equality(work, results) -> dict:
    """Greedy token equality and BLEU differences between the engines (batch-64 runs)."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(
        model_file=str(work / "ct2_float32" / "sentencepiece.model")
    )
    by = {(r["engine"], r["batch"]): r for r in results}

    def lines(label):
        return pathlib.Path(by[(label, 64)]["hypotheses"]).read_text("utf-8").splitlines()

    ours, theirs = lines("saved_fp32 beam 1"), lines("ct2_float32 beam 1")
    same = sum(processor.encode(a) == processor.encode(b) for a, b in zip(ours, theirs))
    bleu = {label: by[(label, 64)]["bleu"] for label, _ in by if (label, 64) in by}
    beam_pairs = zip(lines("saved_fp32 beam 4"), lines("ct2_float32 beam 4"))
    beam_same = sum(a == b for a, b in beam_pairs)
    return dict(
        greedy_token_equal=f"{same}/{len(ours)}",
        beam4_same_text=f"{beam_same}/{len(ours)}",
        beam4_bleu_ct2_minus_saved=bleu["ct2_float32 beam 4"] - bleu["saved_fp32 beam 4"],
        beam4_bleu_int8_minus_float32=bleu["ct2_int8 beam 4"] - bleu["ct2_float32 beam 4"],
        beam4_bleu_int16_minus_float32=bleu["ct2_int16 beam 4"] - bleu["ct2_float32 beam 4"],
    )


def switch_ratios(results) -> list[dict]:
    """Each SavedModel search switch against the plain search of the same export settings, in
    this run: the speed ratio and the translations that are the same text (over the plain run's
    sentences); and each engine's speed against CTranslate2 float32 at the same beam and batch."""
    by = {(r["engine"], r["batch"]): r for r in results}
    rows = []
    for (label, batch), row in by.items():
        engine, beam = label.split(" beam ")
        plain = by.get((f"{'_'.join(engine.split('_')[:2])}_plain beam {beam}", batch))
        ct2 = by.get((f"ct2_float32 beam {beam}", batch))
        entry = dict(engine=label, batch=batch, sentences_per_s=row["sentences_per_s"])
        if ct2:  # the median over rounds of each round's ratio, and its range
            ratios = [a / b for a, b in zip(row["rounds"], ct2["rounds"])]
            entry["vs_ct2_float32"] = median(ratios)
            entry["vs_ct2_float32_range"] = [min(ratios), max(ratios)]
        if plain and plain is not row and label.startswith("saved"):
            entry["vs_plain"] = median([a / b for a, b in zip(row["rounds"], plain["rounds"])])
            ours, theirs = (
                pathlib.Path(r["hypotheses"]).read_text("utf-8").splitlines() for r in (row, plain)
            )
            entry["same_text_as_plain"] = f"{sum(a == b for a, b in zip(ours, theirs))}/{len(ours)}"
        rows.append(entry)
        print(json.dumps(entry), flush=True)
    return rows
