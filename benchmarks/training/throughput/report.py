"""Ratios ours / baseline, the issue's targets, and the printed report."""

from __future__ import annotations

from benchmarks.training.throughput.profile import FULL_STEP
from benchmarks.training.throughput.settings import SETTINGS, SYSTEMS

RATE_KEYS = ("tgt_tokens_per_s", "src_tgt_tokens_per_s", "pairs_per_s")


def compute_ratios(runs) -> tuple:
    """``(ratios, targets)``: rate ratios between runs, and the issue's three targets checked."""
    by = {(r["setting"], r["system"]): r for r in runs if "error" not in r}
    ratios = {}
    for setting in SETTINGS:
        ours, base = by.get((setting, "ours")), by.get((setting, "baseline"))
        if ours and base:
            ratios[f"{setting} vs {setting}"] = {k: ours[k] / base[k] for k in RATE_KEYS}
        base32 = by.get(("fp32", "baseline"))
        if ours and base32 and setting != "fp32":
            ratios[f"{setting} vs fp32 baseline"] = {k: ours[k] / base32[k] for k in RATE_KEYS}
    # The baseline's own speed-up from the dtype policy and from XLA.
    for setting in ("bf16", "bf16_jit", "fp32_jit"):
        b, b32 = by.get((setting, "baseline")), by.get(("fp32", "baseline"))
        if b and b32:
            ratios[f"baseline {setting}/fp32"] = {k: b[k] / b32[k] for k in RATE_KEYS}
    return ratios, _targets(ratios, by.get(("fp32", "ours")))


def _targets(ratios, ours32) -> list:
    def ratio(name, key="tgt_tokens_per_s"):
        return ratios.get(name, {}).get(key)

    bf16 = [
        v
        for v in (ratio("bf16 vs fp32 baseline"), ratio("bf16_jit vs fp32 baseline"))
        if v is not None
    ]
    best_bf16 = max(bf16) if bf16 else None
    targets = [
        {
            "name": "ours/baseline real tgt tokens/s, fp32",
            "value": ratio("fp32 vs fp32"),
            "target": ">= 2",
        },
        {
            "name": "ours bf16 (best of jit/no jit) / baseline fp32, real tgt tokens/s",
            "value": best_bf16,
            "target": ">= 4",
        },
        {
            "name": "ours fp32 executed GFLOP/s / fp32 matmul peak",
            "value": ours32["peak_share_executed"] if ours32 else None,
            "target": ">= 0.60",
        },
    ]
    for t, threshold in zip(targets, (2.0, 4.0, 0.6), strict=True):
        t["pass"] = t["value"] is not None and t["value"] >= threshold
    return targets


def _fmt(value, spec, width):
    if value is None:
        return " " * (width - 1) + "-"
    return format(value, spec).rjust(width)


def print_report(report):
    """Prints the epoch statistics, the table of runs, ratios, targets and profiles."""
    _print_epochs(report)
    runs = [r for r in report["runs"] if "error" not in r]
    for r in report["runs"]:
        if "error" in r:
            print(f"  {r['setting']}/{r['system']}: FAILED: {r['error']}")
    if not runs:
        return
    _print_table(runs)
    _print_ratios_and_targets(report)
    for r in runs:
        if "profile_ms" in r:
            _print_profile(r)
    if report.get("quick"):
        print("(--quick: a few steps only; numbers are a smoke test, not a measurement)")


def _print_epochs(report):
    epoch = report.get("prepare", {}).get("epoch", {})
    print("\n" + "=" * 118)
    cpu = report["cpu"]
    print(
        f"Training throughput, Multi30k en->de train; CPU {cpu.get('model')} x "
        f"{cpu.get('cpus')}, load avg at start {cpu.get('loadavg_at_start')}"
    )
    if not epoch:
        return
    for system in SYSTEMS:
        e = epoch.get(system, {})
        extra = (
            f", {e['rows_filling_40']} rows filling all 40 slots (cut or exactly 40)"
            if "rows_filling_40" in e
            else ""
        )
        print(
            f"  one epoch, {system:<8}: {e.get('batches')} batches, {e.get('pairs')} pairs, "
            f"padded share {e.get('padded_share', 0):.1%} (src+labels), "
            f"{e.get('distinct_shapes')} distinct batch shapes, "
            f"{e.get('mean_target_tokens_per_pair', 0):.1f} target tokens/pair{extra}"
        )


# (header, width, format, value of a run) of each column of the table.
_COLUMNS = [
    ("step ms", 9, ".0f", lambda r: r["step_ms_mean"]),
    ("median", 8, ".0f", lambda r: r["step_ms_median"]),
    ("pairs", 7, ".0f", lambda r: r["pairs_per_batch"]),
    ("pad %", 7, ".1f", lambda r: 100 * r["padded_share"]),
    ("tgt tok/s", 11, ",.0f", lambda r: r["tgt_tokens_per_s"]),
    ("src+tgt/s", 11, ",.0f", lambda r: r["src_tgt_tokens_per_s"]),
    ("pairs/s", 9, ".1f", lambda r: r["pairs_per_s"]),
    ("GFLOP/s", 9, ".1f", lambda r: r["executed_gflops"]),
    ("peak", 7, ".0f", lambda r: r["peak_gflops"]),
    ("%peak", 7, ".1f", lambda r: 100 * (r["peak_share_executed"] or 0)),
    ("useful%", 8, ".1f", lambda r: 100 * (r["peak_share_useful"] or 0)),
    ("compile s", 10, ".0f", lambda r: r["compile_pass_s"]),
    ("RSS MiB", 9, ".0f", lambda r: r["peak_rss_mib"]),
]


def _print_table(runs):
    tokenizers = {r["system"]: r["tokenizer"] for r in runs}
    for system, name in tokenizers.items():
        print(f"  {system} tokenizer: {name}")
    print(
        "  step ms = mean over the timed steps; compile s = untimed pass over new batch shapes "
        "(one untimed step per new shape: XLA and our XLA loss compile per shape)."
    )
    print(
        "  tgt tok/s = real target tokens (non-pad labels, EOS incl.) per second; src+tgt adds "
        "non-pad source tokens.\n  GFLOP/s executed = 6*params*all slots + attention (padding "
        "included), vs the best n x n tf.matmul of the same dtype in the same process."
    )
    header = f"{'setting':<9}{'system':<9}" + "".join(
        f"{title:>{width}}" for title, width, _, _ in _COLUMNS
    )
    print("-" * len(header))
    print(header)
    print("-" * len(header))
    for r in runs:
        cells = "".join(_fmt(value(r), spec, width) for _, width, spec, value in _COLUMNS)
        print(f"{r['setting']:<9}{r['system']:<9}{cells}")
    print("-" * len(header))


def _print_ratios_and_targets(report):
    ratios = report.get("ratios", {})
    if ratios:
        print("ours / baseline             tgt tok/s  src+tgt/s   pairs/s")
        for name, value in ratios.items():
            print(
                f"  {name:<24}{_fmt(value['tgt_tokens_per_s'], '.2f', 11)}"
                f"{_fmt(value['src_tgt_tokens_per_s'], '.2f', 11)}"
                f"{_fmt(value['pairs_per_s'], '.2f', 10)}"
            )
    checks = report.get("targets", [])
    if checks:
        print("targets of the issue:")
        for check in checks:
            status = "n/a " if check["value"] is None else ("PASS" if check["pass"] else "FAIL")
            value = "-" if check["value"] is None else f"{check['value']:.2f}"
            print(f"  [{status}] {check['name']}: {value} (target {check['target']})")


def _print_profile(r):
    p = r["profile_ms"]
    print(
        f"profile of our step ({r['setting']}, ms per step on the first "
        f"{r['args_profile_steps']} timed batches):"
    )
    for name, value in p.items():
        if name == "micro":
            for layer, m in value.items():
                share = m["gflops"] / r["peak_gflops"]
                print(
                    f"  micro {layer:<38} fwd+bwd {m['ms']:7.2f} ms "
                    f"{m['gflops']:7.1f} GFLOP/s ({share:.0%} of peak)"
                )
        elif value is not None:
            print(f"  {name:<48} {value:8.1f}")
    full = p.get(FULL_STEP)
    parts = [
        ("loss (LS 0.1) in the forward", "forward + loss", "forward (training=True)"),
        ("backward", "forward + backward (no update)", "forward + loss"),
        ("Adam update + Keras step overhead", "step, LS 0.1, no metrics",
         "forward + backward (no update)"),
        ("the 3 metrics", FULL_STEP, "step, LS 0.1, no metrics"),
        ("label smoothing vs plain CE", "step, LS 0.1, no metrics",
         "step, plain CE (LS 0), no metrics"),
    ]  # fmt: skip
    print("  derived (differences, noisy):")
    for name, a_key, b_key in parts:
        a, b = p.get(a_key), p.get(b_key)
        if a is not None and b is not None and full:
            print(f"    {name:<46} {a - b:8.1f}  ({(a - b) / full:+.0%} of the full step)")
