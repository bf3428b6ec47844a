"""The batches one measurement runs on, and one-epoch statistics of each system's pipeline."""

from __future__ import annotations

from benchmarks.training.throughput.baseline import baseline_dataset
from benchmarks.training.throughput.ours import ours_dataset
from benchmarks.training.throughput.settings import SYSTEMS


def take_batches(system, args, count):
    """``count`` batches as (inputs dict, labels, numpy source, numpy labels)."""
    import tensorflow as tf

    if system == "ours":
        dataset, info = ours_dataset(args)
        dataset = dataset.map(lambda inputs, labels: (inputs["source"], inputs["target"], labels))
        keys = ("source", "target")
    else:
        dataset, info = baseline_dataset(args)
        keys = ("encoder_inputs", "decoder_inputs")
    batches = []
    for source, target, labels in dataset.take(count):
        batches.append(
            (
                {keys[0]: tf.identity(source), keys[1]: tf.identity(target)},
                tf.identity(labels),
                source.numpy(),
                labels.numpy(),
            )
        )
    if len(batches) < count:
        raise RuntimeError(f"{system}: the pipeline gave {len(batches)} batches, {count} needed")
    return batches, info


def epoch_stats(args) -> dict:
    """Padding share and shape count of one full epoch of each natural pipeline."""
    out = {}
    for system in SYSTEMS:
        if system == "ours":
            dataset, _ = ours_dataset(args)
            dataset = dataset.map(lambda inputs, labels: (inputs["source"], labels))
        else:
            dataset, _ = baseline_dataset(args)
            dataset = dataset.map(lambda source, target, labels: (source, labels))
        out[system] = _one_epoch(dataset, count_full_rows=system == "baseline")
    return out


def _one_epoch(dataset, count_full_rows) -> dict:
    """Counts over one pass of ``(source, labels)`` batches (0 = padding)."""
    real = slots = pairs = batches = tgt = truncated = 0
    shapes = set()
    for source, labels in dataset:
        source, labels = source.numpy(), labels.numpy()
        batches += 1
        pairs += source.shape[0]
        real += int((source != 0).sum() + (labels != 0).sum())
        tgt += int((labels != 0).sum())
        slots += source.size + labels.size
        shapes.add(source.shape + labels.shape[1:])
        if count_full_rows:  # a full row has no padding left: the sentence was cut
            truncated += int((source[:, -1] != 0).sum() + (labels[:, -1] != 0).sum())
    stats = {
        "batches": batches,
        "pairs": pairs,
        "real_tokens": real,
        "target_tokens": tgt,
        "slots": slots,
        "padded_share": 1.0 - real / max(slots, 1),
        "distinct_shapes": len(shapes),
        "mean_target_tokens_per_pair": tgt / max(pairs, 1),
    }
    if count_full_rows:
        stats["rows_filling_40"] = truncated
    return stats
