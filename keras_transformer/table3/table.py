"""The ablation's report: a Markdown table shaped like the paper's Table 3 (our numbers beside
the paper's finding for each row), the base seeds' noise, which differences lie within it (one
rule, :func:`noise_bound`, for the column and the summary), when and on which CPU each row was
trained, and a small PNG plot of validation BLEU and perplexity per row next to the table."""

from __future__ import annotations

import math
import pathlib
import statistics

from keras_transformer.text.files import atomic_path, atomic_write_text

__all__ = ["base_noise", "noise_bound", "write_plot", "write_table"]

COLUMNS = ["N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls"]
HEADER = [
    "row",
    *COLUMNS,
    "params",
    "val PPL",
    "val BLEU",
    "minutes",
    "updates",
    "trained",
    "BLEU vs base",
    "paper (Table 3: PPL, BLEU)",
]


# A row is one run; the base is the mean of n seeds. Their difference has a standard deviation
# of s * sqrt(1 + 1/n) (s: the seeds' sample standard deviation); "within noise" means within
# two of those. With few seeds s is itself uncertain: the table says how many it rests on.
NOISE_SIGMAS = 2.0


def noise_bound(std: float, seeds: int) -> float:
    """How far one run may lie from the mean of ``seeds`` base runs and still be read as noise:
    ``2 * std * sqrt(1 + 1 / seeds)``."""
    return NOISE_SIGMAS * std * math.sqrt(1.0 + 1.0 / seeds)


def base_noise(entries: list[dict]) -> dict | None:
    """The finished base seeds' BLEU and perplexity: values, mean, sample standard deviation
    (None with one seed) and :func:`noise_bound` of each; None when no base row has finished."""
    done = [e["result"] for e in entries if e["group"] == "base" and e["status"] == "finished"]
    if not done:
        return None
    noise = {"seeds": len(done)}
    for metric, key in (("bleu", "val_bleu"), ("ppl", "val_perplexity")):
        values = [r[key] for r in done]
        std = statistics.stdev(values) if len(values) > 1 else None
        noise[metric] = {
            "values": values,
            "mean": statistics.fmean(values),
            "std": std,
            "bound": None if std is None else noise_bound(std, len(values)),
        }
    return noise


def _verdict(diff: float, metric: dict) -> str:
    """``within`` or ``beyond`` the noise bound, or ``""`` without one (a single seed)."""
    if metric["bound"] is None:
        return ""
    return "within" if abs(diff) <= metric["bound"] else "beyond"


def _versus_base(entry: dict, noise: dict | None) -> str:
    if entry["status"] != "finished" or noise is None or entry["group"] == "base":
        return ""
    diff = entry["result"]["val_bleu"] - noise["bleu"]["mean"]
    verdict = _verdict(diff, noise["bleu"])
    return f"{diff:+.2f} ({verdict} noise)" if verdict else f"{diff:+.2f}"


def _trained(entry: dict) -> str:
    """When, where and on which commit the row was trained; ``earlier *`` for a row carried
    from an ablation that did not record it."""
    trained = entry.get("trained")
    if not trained:
        return "earlier *"
    commit = f", {trained['commit']}" if trained.get("commit") else ""
    return f"{trained['date']}, {trained['cpu']}{commit}"


def _cells(entry: dict, base: dict, noise: dict | None) -> list[str]:
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
    if values and base and values.get("positional_stddev") != base.get("positional_stddev"):
        stddev = values["positional_stddev"]
        extra.append("start: Glorot" if stddev is None else f"start: normal, stddev {stddev}")
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
            _trained(entry),
        ]
    else:
        why = entry.get("error") if entry["status"] == "failed" else None
        status = f"failed: {why}" if why else entry["status"]
        cells += [status.replace("|", "\\|"), "", "", "", "", ""]
    return [*cells, _versus_base(entry, noise), entry.get("paper", "")]


def _noise_lines(entries: list[dict], noise: dict | None) -> list[str]:
    if noise is None:
        return ["No base row has finished yet: no noise to read the rows against."]
    seeds, bleu, ppl = noise["seeds"], noise["bleu"], noise["ppl"]
    lines = [
        f"Base seeds ({seeds}): val BLEU {', '.join(f'{b:.2f}' for b in bleu['values'])}; "
        f"val PPL {', '.join(f'{p:.2f}' for p in ppl['values'])}."
    ]
    if seeds < 2:
        return [*lines, "One seed only: the run-to-run noise is unknown (use seeds >= 3)."]
    lines[0] += (
        f" Mean BLEU {bleu['mean']:.2f}, standard deviation {bleu['std']:.2f}; mean PPL "
        f"{ppl['mean']:.2f}, standard deviation {ppl['std']:.3f}."
    )
    within, beyond = [], []
    for entry in entries:
        if entry["group"] == "base" or entry["status"] != "finished":
            continue
        diff = entry["result"]["val_bleu"] - bleu["mean"]
        (within if _verdict(diff, bleu) == "within" else beyond).append(entry["id"])
    lines.append(
        f'One rule for "within noise", in the column and here: a row (one run) lies within '
        f"noise when its BLEU differs from the base mean by at most 2 s sqrt(1 + 1/n) = "
        f"{bleu['bound']:.2f} BLEU (s: the seeds' sample standard deviation, n = {seeds} seeds; "
        f"the same bound for PPL is {ppl['bound']:.3f}). "
        + ("With fewer than 3 seeds s is a guess: read the verdicts loosely. " if seeds < 3 else "")
        + "BLEU within noise (not told apart from the base by these runs' BLEU; the findings "
        f"below give PPL too): {', '.join(within) or 'none'}. "
        f"Beyond: {', '.join(beyond) or 'none'}."
    )
    if any(e["status"] == "finished" and not e.get("trained") for e in entries):
        lines.append(
            "\\* trained by an earlier ablation with the same settings, which did not record the "
            "date, CPU or commit (minutes are not comparable across machines)."
        )
    return lines


def _finding_lines(entries: list[dict], noise: dict | None) -> list[str]:
    """Per group: the paper's finding, then each finished row's BLEU and PPL against the base
    mean, each with its verdict by the one noise rule."""
    from keras_transformer.table3.rows import GROUPS, PAPER_FINDINGS

    if noise is None:
        return []
    lines = ["## The paper's findings and ours", ""]
    for group in GROUPS:
        rows = [e for e in entries if e["group"] == group and e["status"] == "finished"]
        if not rows:
            continue
        ours = []
        for entry in rows:
            r = entry["result"]
            bleu = r["val_bleu"] - noise["bleu"]["mean"]
            ppl = r["val_perplexity"] - noise["ppl"]["mean"]
            verdicts = [_verdict(bleu, noise["bleu"]), _verdict(ppl, noise["ppl"])]
            bleu_text = f"{bleu:+.2f} BLEU" + (f" ({verdicts[0]})" if verdicts[0] else "")
            ppl_text = f"{ppl:+.2f} PPL" + (f" ({verdicts[1]})" if verdicts[1] else "")
            ours.append(f"{entry['id']} {bleu_text}, {ppl_text}")
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
    noise = base_noise(entries)
    lines = [*header, ""]
    lines.append("| " + " | ".join(HEADER) + " |")
    lines.append("|" + "---|" * len(HEADER))
    for entry in entries:
        lines.append("| " + " | ".join(_cells(entry, base, noise)) + " |")
    lines += ["", *_noise_lines(entries, noise), "", *_finding_lines(entries, noise)]
    if plot is not None:
        lines += ["", f"![val BLEU and PPL per row]({pathlib.Path(plot).name})"]
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def write_plot(path, entries: list[dict]) -> pathlib.Path | None:
    """Two small panels, val BLEU and val PPL of every finished row, the base mean plus or
    minus the noise bound shaded; None when no row has finished or matplotlib is missing."""
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
    noise = base_noise(entries)
    height = max(2.5, 0.22 * len(done) + 1.0)
    figure, axes = plt.subplots(1, 2, figsize=(7.5, height), sharey=True)
    panels = ((axes[0], "val_bleu", "bleu", "val BLEU"), (axes[1], "val_perplexity", "ppl", "PPL"))
    for axis, key, metric, label in panels:
        values = [e["result"][key] for e in done]
        colors = ["tab:gray" if e["group"] == "base" else "tab:blue" for e in done]
        axis.scatter(values, range(len(done)), c=colors, zorder=3)  # dots: the axis is cut
        axis.grid(axis="x", alpha=0.3)
        if noise and noise[metric]["bound"] is not None:  # the base mean +- the noise bound
            mean, bound = noise[metric]["mean"], noise[metric]["bound"]
            axis.axvspan(mean - bound, mean + bound + 1e-9, color="tab:orange", alpha=0.3)
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
