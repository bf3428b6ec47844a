"""The FLOP model of a training step, per-batch counts, and the summary of the timed steps.

FLOPs: 6 * (matmul parameters a position touches) per position + attention score terms, i.e.
forward = 2 * MACs, backward = 2 * forward (see ``benchmarks/training/train_throughput.py``).
"""

from __future__ import annotations


def flop_model(d, d_ff, enc_layers, dec_layers, out_vocab) -> dict:
    """Multiply-accumulates per position / per attention pair (see the module docstring)."""
    return {
        "per_source_position": enc_layers * (4 * d * d + 2 * d * d_ff) + dec_layers * 2 * d * d,
        "per_target_position": dec_layers * (6 * d * d + 2 * d * d_ff) + d * out_vocab,
        "enc_self_pair": enc_layers * 2 * d,  # x S^2 per sequence
        "dec_self_pair": dec_layers * 2 * d,  # x T^2
        "cross_pair": dec_layers * 2 * d,  # x T*S
    }


def _train_flops(macs, src_pos, tgt_pos, ss, tt, ts):
    mac = (
        macs["per_source_position"] * src_pos
        + macs["per_target_position"] * tgt_pos
        + macs["enc_self_pair"] * ss
        + macs["dec_self_pair"] * tt
        + macs["cross_pair"] * ts
    )
    return 6.0 * mac  # forward 2 * MACs, backward twice the forward


def batch_stats(source, labels, macs) -> dict:
    """Token counts and training FLOPs of one batch (numpy int arrays, 0 = padding)."""
    import numpy as np

    s_len = (source != 0).sum(axis=1).astype(np.int64)
    t_len = (labels != 0).sum(axis=1).astype(np.int64)
    b, s, t = source.shape[0], source.shape[1], labels.shape[1]
    return {
        "pairs": int(b),
        "shape": [int(b), int(s), int(t)],
        "tgt_tokens": int(t_len.sum()),
        "src_tokens": int(s_len.sum()),
        "slots": int(b * s + b * t),
        "executed_flops": _train_flops(macs, b * s, b * t, b * s * s, b * t * t, b * t * s),
        "useful_flops": _train_flops(
            macs,
            int(s_len.sum()),
            int(t_len.sum()),
            int((s_len**2).sum()),
            int((t_len**2).sum()),
            int((t_len * s_len).sum()),
        ),
    }


def summarize(times, stats, peak_gflops) -> dict:
    """Step times, token and pair rates, GFLOP/s and their share of ``peak_gflops``."""
    import numpy as np

    total = float(sum(times))
    agg = {
        k: sum(s[k] for s in stats)
        for k in ("pairs", "tgt_tokens", "src_tokens", "slots", "executed_flops", "useful_flops")
    }
    real = agg["tgt_tokens"] + agg["src_tokens"]
    executed = agg["executed_flops"] / total / 1e9
    return {
        "steps": len(times),
        "seconds": total,
        "step_ms_mean": 1e3 * total / len(times),
        "step_ms_median": 1e3 * float(np.median(times)),
        "step_ms_min": 1e3 * float(min(times)),
        "pairs_per_batch": agg["pairs"] / len(times),
        "tgt_tokens_per_batch": agg["tgt_tokens"] / len(times),
        "padded_share": 1.0 - real / agg["slots"],
        "tgt_tokens_per_s": agg["tgt_tokens"] / total,
        "src_tgt_tokens_per_s": real / total,
        "pairs_per_s": agg["pairs"] / total,
        "executed_gflops": executed,
        "useful_gflops": agg["useful_flops"] / total / 1e9,
        "peak_share_executed": executed / peak_gflops if peak_gflops else None,
        "peak_share_useful": (
            agg["useful_flops"] / total / 1e9 / peak_gflops if peak_gflops else None
        ),
    }
