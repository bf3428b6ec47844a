"""The ablation's report: a Markdown table shaped like the paper's Table 3 (our numbers beside
the paper's finding for each row), the base seeds' spread, which differences lie within it, and
a small PNG plot of validation BLEU and perplexity per row next to the table."""

from __future__ import annotations

import math
import pathlib
import statistics

from keras_transformer.text.files import atomic_path, atomic_write_text

__all__ = ["base_spread", "write_plot", "write_table"]

COLUMNS = ["N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls"]
HEADER = [
    "row",
    *COLUMNS,
    "params",
    "val PPL",
    "val BLEU",
    "minutes",
    "updates",
    "BLEU vs base",
    "paper (Table 3: PPL, BLEU)",
]


def base_spread(entries: list[dict]) -> dict | None:
    """Mean and spread (max - min) of the finished base seeds' BLEU and perplexity, or None."""
    done = [e["result"] for e in entries if e["group"] == "base" and e["status"] == "finished"]
    if not done:
        return None
    bleu = [r["val_bleu"] for r in done]
    ppl = [r["val_perplexity"] for r in done]
    return {
        "seeds": len(done),
        "bleu": bleu,
        "perplexity": ppl,
        "bleu_mean": statistics.fmean(bleu),
        "bleu_spread": max(bleu) - min(bleu),
        "ppl_mean": statistics.fmean(ppl),
        "ppl_spread": max(ppl) - min(ppl),
    }


def _within(value: float, mean: float, spread: float) -> bool:
    """Whether ``value`` differs from the base mean by no more than the seeds' spread."""
    return abs(value - mean) <= spread


def _versus_base(entry: dict, spread: dict | None) -> str:
    if entry["status"] != "finished" or spread is None or entry["group"] == "base":
        return ""
    diff = entry["result"]["val_bleu"] - spread["bleu_mean"]
    if spread["seeds"] < 2:
        return f"{diff:+.2f}"
    return f"{diff:+.2f} ({'within' if abs(diff) <= spread['bleu_spread'] else 'beyond'} spread)"


def _cells(entry: dict, base: dict, spread: dict | None) -> list[str]:
    values = entry.get("values") or {}
    cells = [entry["id"]]
    for column in COLUMNS:
        value = values.get(column, "")
        text = f"{value:g}" if isinstance(value, float) else str(value)
        changed = column in values and base and value != base.get(column)
        cells.append(f"**{text}**" if changed else text)
    extra = []
    if values and base and values.get("positional") != base.get("positional"):
        extra.append(f"positional: {values['positional']}")
    if values and base and values.get("window") != base.get("window"):
        extra.append(f"window r={values['window']}")
    if extra:
        cells[0] += f" ({', '.join(extra)})"
    if entry["status"] == "finished":
        r = entry["result"]
        cells += [
            f"{r['params']:,}",
            f"{r['val_perplexity']:.2f}",
            f"{r['val_bleu']:.2f}",
            f"{r['minutes']:.1f}",
            str(r["updates"]),
        ]
    else:
        why = entry.get("error") if entry["status"] == "failed" else None
        status = f"failed: {why}" if why else entry["status"]
        cells += [status.replace("|", "\\|"), "", "", "", ""]
    return [*cells, _versus_base(entry, spread), entry.get("paper", "")]


def _spread_lines(entries: list[dict], spread: dict | None) -> list[str]:
    if spread is None:
        return ["No base row has finished yet: no spread to read the rows against."]
    bleu = ", ".join(f"{b:.2f}" for b in spread["bleu"])
    ppl = ", ".join(f"{p:.2f}" for p in spread["perplexity"])
    lines = [
        f"Base seeds ({spread['seeds']}): val BLEU {bleu} (mean {spread['bleu_mean']:.2f}, "
        f"spread {spread['bleu_spread']:.2f}); val PPL {ppl} (mean {spread['ppl_mean']:.2f}, "
        f"spread {spread['ppl_spread']:.2f})."
    ]
    if spread["seeds"] < 2:
        return [*lines, "One seed only: the run-to-run spread is unknown (use seeds >= 2)."]
    within, beyond = [], []
    for entry in entries:
        if entry["group"] == "base" or entry["status"] != "finished":
            continue
        r = entry["result"]
        bleu_in = _within(r["val_bleu"], spread["bleu_mean"], spread["bleu_spread"])
        ppl_in = _within(r["val_perplexity"], spread["ppl_mean"], spread["ppl_spread"])
        (within if bleu_in and ppl_in else beyond).append(entry["id"])
    lines.append(
        "A row lies within the spread when both its BLEU and its PPL differ from the base mean "
        "by no more than the base seeds' max - min. Within (not told apart from the base by "
        f"these runs): {', '.join(within) or 'none'}. Beyond: {', '.join(beyond) or 'none'}."
    )
    return lines


def _finding_lines(entries: list[dict], spread: dict | None) -> list[str]:
    """Per group: the paper's finding, then each finished row's BLEU and PPL against the base
    mean (and whether that lies within the base seeds' spread)."""
    from keras_transformer.table3.rows import GROUPS, PAPER_FINDINGS

    if spread is None:
        return []
    lines = ["## The paper's findings and ours", ""]
    for group in GROUPS:
        rows = [e for e in entries if e["group"] == group and e["status"] == "finished"]
        if not rows:
            continue
        ours = []
        for entry in rows:
            r = entry["result"]
            bleu, ppl = (
                r["val_bleu"] - spread["bleu_mean"],
                r["val_perplexity"] - spread["ppl_mean"],
            )
            inside = abs(bleu) <= spread["bleu_spread"] and abs(ppl) <= spread["ppl_spread"]
            where = "" if spread["seeds"] < 2 else (" (within)" if inside else " (beyond)")
            ours.append(f"{entry['id']} {bleu:+.2f} BLEU, {ppl:+.2f} PPL{where}")
        lines.append(
            f"- ({group}) paper: {PAPER_FINDINGS[group]}. Ours vs base: {'; '.join(ours)}."
        )
    return [*lines, ""]


def write_table(path, entries: list[dict], header: list[str], plot=None) -> pathlib.Path:
    """Writes the Markdown report to ``path`` (temp file + rename); ``entries`` are the state
    file's rows (``id``, ``group``, ``status``, ``values``, ``result``/``error``, ``paper``),
    ``header`` the lines above the table (budget, evaluation, base config)."""
    path = pathlib.Path(path)
    base = next((e.get("values") for e in entries if e["id"] == "base"), None) or {}
    spread = base_spread(entries)
    lines = [*header, ""]
    lines.append("| " + " | ".join(HEADER) + " |")
    lines.append("|" + "---|" * len(HEADER))
    for entry in entries:
        lines.append("| " + " | ".join(_cells(entry, base, spread)) + " |")
    lines += ["", *_spread_lines(entries, spread), "", *_finding_lines(entries, spread)]
    if plot is not None:
        lines += ["", f"![val BLEU and PPL per row]({pathlib.Path(plot).name})"]
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def write_plot(path, entries: list[dict]) -> pathlib.Path | None:
    """Two small panels, val BLEU and val PPL of every finished row, the base seeds' range
    shaded; None when no row has finished or matplotlib is missing."""
    done = [e for e in entries if e["status"] == "finished"]
    if not done:
        return None
    try:
        import matplotlib
    except ImportError:  # the [plot] extra
        print("No plot: matplotlib is not installed (pip install 'keras-transformer[plot]')")
        return None
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    path = pathlib.Path(path)
    ids = [e["id"] for e in done]
    base = [e["result"] for e in done if e["group"] == "base"]
    height = max(2.5, 0.22 * len(done) + 1.0)
    figure, axes = plt.subplots(1, 2, figsize=(7.5, height), sharey=True)
    for axis, key, label in ((axes[0], "val_bleu", "val BLEU"), (axes[1], "val_perplexity", "PPL")):
        values = [e["result"][key] for e in done]
        colors = ["tab:gray" if e["group"] == "base" else "tab:blue" for e in done]
        axis.scatter(values, range(len(done)), c=colors, zorder=3)  # dots: the axis is cut
        axis.grid(axis="x", alpha=0.3)
        if base:
            low, high = min(r[key] for r in base), max(r[key] for r in base)
            axis.axvspan(low, high if high > low else low + 1e-9, color="tab:orange", alpha=0.3)
        finite = [v for v in values if math.isfinite(v)]
        if finite and max(finite) > min(finite):
            axis.set_xlim(min(finite) * 0.9, max(finite) * 1.05)
        axis.set_xlabel(label)
    axes[0].set_yticks(range(len(done)), ids, fontsize=7)
    axes[0].invert_yaxis()
    figure.tight_layout()
    with atomic_path(path) as tmp:
        figure.savefig(tmp, dpi=90)
    plt.close(figure)
    return path
