# Paper section 6.2 (Table 3): variations of the base model, each trained at one budget and
# scored on the development set.
"""``ablate``: Table 3 at the scale of one base config. Every row (``table3/rows.py``) trains in
its own run directory ``OUTPUT/<row>`` through a fresh ``keras-transformer train`` process at
the same budget (the same updates, or the same minutes), is scored on the whole validation split
(``table3/evaluate.py``), and the table and plot are rewritten after each row (``table3/table.py``).

Kill-safe: ``OUTPUT/ablation.json`` (written by temp file + rename) records each row's status;
running the same call again skips finished rows, resumes the unfinished one from its run's
backup (``train`` resumes exactly) and retries failed rows only with ``retry_failed``. A row that
fails (a bad override, a crash of its process) is kept in the table with its error's last line.
The finished rows also go to ``TABLE.json`` beside the table: an output folder without a state
file (a new machine, the run folders gone) takes them from there when its settings are the same,
so a table committed with its JSON resumes anywhere (delete the JSON to train them again).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

from keras_transformer.machine import machine_record
from keras_transformer.table3.rows import (
    GROUPS,
    Row,
    base_values,
    plan_rows,
)
from keras_transformer.table3.runner import (
    LOG_DIR,
    hold_output,
    read_state,
    train_row,
    wait_for_stale,
    write_state,
)
from keras_transformer.table3.settings import (
    AblationSettings,
    load_base,
    resolve_settings,
    table_header,
)
from keras_transformer.training.run_config import TrainingConfig
from keras_transformer.training.run_dir import FINISHED_FILE

__all__ = ["AblationInterrupted", "AblationResult", "ablate", "ablation_plan"]

STATE_VERSION = 1
# Override key -> Table 3 column(s), to show what a row that cannot be built asked for.
_COLUMN_OF = {
    "model.num_layers": ("N",),
    "model.d_model": ("d_model",),
    "model.d_ff": ("d_ff",),
    "model.num_heads": ("h",),
    "model.key_dim": ("d_k", "d_v"),
    "model.value_dim": ("d_v",),
    "model.positional_stddev": ("positional_stddev",),
    "model.dropout": ("P_drop",),
    "training.label_smoothing": ("eps_ls",),
    "model.positional": ("positional",),
    "model.attention_window": ("window",),
}


class AblationInterrupted(Exception):
    """A row's train process was stopped by SIGTERM or SIGINT: rerun the same call to resume."""


@dataclasses.dataclass
class AblationResult:
    """The rows under ``output`` (state-file entries, table order), the ids of the failed ones,
    and the table and plot written."""

    rows: list[dict]
    failed: list[str]
    table: pathlib.Path
    plot: pathlib.Path | None


def ablation_plan(config=None, rows=None, seeds=None, overrides=None, plan=None, **budget) -> list:
    """The rows ``ablate`` would train with these arguments (or this plan file), as dicts:
    ``id``, ``group``, ``overrides`` (the row's own, then the budget's, after the common ones),
    ``paper``; nothing is trained or written."""
    settings = resolve_settings(
        plan, config=config, output=".", rows=rows, seeds=seeds, overrides=overrides, **budget
    )
    base = load_base(settings)
    every = settings.budget_overrides(base)
    return [
        {**row.to_dict(), "train_overrides": [*settings.overrides, *every, *row.overrides]}
        for row in plan_rows(base, settings.rows, settings.seeds)
    ]


def _values(settings: AblationSettings, row: Row, base: dict) -> tuple[dict, str | None]:
    """The row's Table 3 columns and why it cannot be built (None when it can)."""
    from keras_transformer.training.inputs import check_inputs

    try:
        config = TrainingConfig.load(settings.config, [*settings.overrides, *row.overrides])
        check_inputs(config)
        return base_values(config), None
    except (ValueError, FileNotFoundError, TypeError) as error:  # DataError is a ValueError
        asked = dict(base)
        for override in row.overrides:
            key, _, value = override.partition("=")
            for column in _COLUMN_OF.get(key, ()):
                asked[column] = _parsed(value)
        return asked, str(error).strip().splitlines()[-1]


def _parsed(value: str):
    import yaml

    try:
        return yaml.safe_load(value)
    except yaml.YAMLError:
        return value


def _open_state(settings: AblationSettings, rows: list[Row], base: dict) -> dict:
    """The output folder's state, refused if it holds an ablation of other settings; rows
    not in it yet are added (pending), and a row whose overrides changed since it was trained
    (a row redefined, as row B was) is trained again (:func:`_redefined`)."""
    fingerprint = settings.fingerprint()
    state = read_state(settings.output)
    if state is None:
        state = {"version": STATE_VERSION, "settings": fingerprint, "rows": {}}
        state["rows"].update(_rows_of_the_table(settings.table.with_suffix(".json"), fingerprint))
    elif state.get("settings") != fingerprint:
        diffs = [
            f"{key}: {state.get('settings', {}).get(key)!r} there, {value!r} now"
            for key, value in fingerprint.items()
            if state.get("settings", {}).get(key) != value
        ]
        raise ValueError(
            f"{settings.output} holds an ablation with other settings ({'; '.join(diffs)}): "
            "use a new --output"
        )
    for row in rows:
        entry = state["rows"].setdefault(
            row.id, {"id": row.id, "group": row.group, "status": "pending", "attempts": 0}
        )
        if "overrides" in entry and entry["overrides"] != list(row.overrides):
            entry = state["rows"][row.id] = _redefined(settings, entry, row)
        entry.update(overrides=list(row.overrides), paper=row.paper)
    return state


def _redefined(settings: AblationSettings, entry: dict, row: Row) -> dict:
    """A pending entry for ``row``, whose overrides differ from those ``entry`` was trained
    with; its run folder, if any, is kept beside under ``ID.before-N`` (not resumed)."""
    print(
        f"{row.id}: trained with {' '.join(entry['overrides']) or 'no overrides'}, now "
        f"{' '.join(row.overrides) or 'none'}: trained again",
        flush=True,
    )
    run_dir = settings.output / row.id
    if run_dir.exists():
        n = 1
        while run_dir.with_name(f"{row.id}.before-{n}").exists():
            n += 1
        run_dir.rename(run_dir.with_name(f"{row.id}.before-{n}"))
    return {"id": row.id, "group": row.group, "status": "pending", "attempts": 0}


def _rows_of_the_table(path: pathlib.Path, fingerprint: dict) -> dict:
    """The finished rows recorded in the table's JSON, if it was made with these settings."""
    import json

    if not path.is_file():
        return {}
    recorded = json.loads(path.read_text())
    if recorded.get("settings") != fingerprint:
        return {}
    print(f"finished rows taken from {path}: {', '.join(recorded['rows'])}", flush=True)
    return recorded["rows"]


def _ordered(state: dict, base: TrainingConfig) -> list[dict]:
    """Table order: base, A, B, C, D, E, R, custom; within a group, Table 3's order of the
    standard rows (whenever each was trained), then the others as they came."""
    groups = ["base", *GROUPS, "custom"]
    standard = {row.id: n for n, row in enumerate(plan_rows(base, None, seeds=1))}
    entries = list(state["rows"].values())
    return sorted(
        entries,
        key=lambda e: (groups.index(e["group"]), standard.get(e["id"], len(standard))),
    )


def _report(settings: AblationSettings, state: dict, base: TrainingConfig, base_row: dict):
    from keras_transformer.table3.table import write_plot, write_table

    entries = _ordered(state, base)
    plot = write_plot(settings.table.with_suffix(".png"), entries)
    header = table_header(settings, base, base_row)
    scored = {
        (e["result"]["val_pairs_scored"], e["result"]["val_sentences"])
        for e in entries
        if e["status"] == "finished"
    }
    if scored:
        counts = ", ".join(f"{a} of {b}" for a, b in sorted(scored))
        header.append(
            f"Val PPL scored {counts} pairs (a pair longer than the positional table cannot be "
            "fed; BLEU translates every sentence)."
        )
    write_table(settings.table, entries, header, plot)
    finished = {e["id"]: {**e, "pid": None} for e in entries if e["status"] == "finished"}
    record = {"settings": state["settings"], "rows": finished}
    write_state(settings.table.parent, record, settings.table.with_suffix(".json").name)
    return entries, plot


def _run_row(settings: AblationSettings, state: dict, entry: dict, values: dict) -> None:
    """Trains the row (unless its run finished) and scores it; the entry records the outcome."""
    from keras_transformer.table3.evaluate import evaluate_run

    run_dir = settings.output / entry["id"]
    base = load_base(settings)
    command = ["train", "--config", settings.config, "--run", str(run_dir)]
    command += [*settings.overrides, *settings.budget_overrides(base), *entry["overrides"]]
    wait_for_stale(entry.get("pid"), run_dir)
    if not (run_dir / FINISHED_FILE).exists():
        entry.update(status="running", attempts=entry.get("attempts", 0) + 1)

        def started(pid):
            entry["pid"] = pid
            write_state(settings.output, state)

        ended = train_row(command, run_dir, settings.output / LOG_DIR, started)
        entry["pid"] = None
        if ended.interrupted:
            write_state(settings.output, state)
            raise AblationInterrupted(f"{entry['id']}: {ended.error}; rerun to resume it")
        if ended.returncode:
            entry.update(status="failed", error=ended.error)
            return
    try:
        entry.update(result=evaluate_run(run_dir, beam_size=settings.beam_size))
    except Exception as error:  # a broken run must not end the other rows
        why = str(error).strip().splitlines()[-1] if str(error).strip() else ""
        entry.update(status="failed", error=f"scoring: {type(error).__name__}: {why}")
        return
    entry.update(status="finished", error=None, values=values, trained=_trained_where(run_dir))


def _trained_where(run_dir: pathlib.Path) -> dict:
    """Where and when the row's training finished (its ``finished.json``), even when a later
    ablation scores it; this machine now for a run finished before runs recorded it."""
    finished = json.loads((run_dir / FINISHED_FILE).read_text())
    return finished.get("trained") or machine_record()


def ablate(
    config=None,
    output=None,
    rows=None,
    steps=None,
    minutes=None,
    seeds=None,
    table=None,
    retry_failed: bool = False,
    overrides=None,
    beam_size=None,
    plan=None,
) -> AblationResult:
    """Trains and scores the rows of Table 3 over the base ``config`` (see the module docstring).

    ``rows``: groups (``"A"`` .. ``"E"``, ``"R"``), row ids (``"A-h1"``) or custom rows
    (``{"id": ..., "overrides": [...]}``); default every group; the base row always, with
    ``seeds`` seeds (default 3). The budget: ``steps`` (the same updates) or ``minutes``.
    ``overrides`` apply to every row. ``table`` defaults to ``OUTPUT/table3.md``; the plot is
    the same name with ``.png``. ``plan``: a plan file whose values the arguments override.
    Raises ``AblationInterrupted`` when a row's process was stopped by a signal.
    """
    settings = resolve_settings(
        plan,
        config=config,
        output=output,
        rows=rows,
        steps=steps,
        minutes=minutes,
        seeds=seeds,
        table=table,
        overrides=overrides,
        beam_size=beam_size,
        retry_failed=retry_failed or None,
    )
    base = load_base(settings)
    base_row = base_values(base)
    planned = plan_rows(base, settings.rows, settings.seeds)
    lock = hold_output(settings.output)
    try:
        state = _open_state(settings, planned, base_row)
        write_state(settings.output, state)
        for number, row in enumerate(planned, 1):
            _train_one(settings, state, row, base_row, f"[{number}/{len(planned)}]")
            _report(settings, state, base, base_row)
        entries, plot = _report(settings, state, base, base_row)
    finally:
        lock.close()
    failed = [e["id"] for e in entries if e["status"] == "failed"]
    return AblationResult(entries, failed, settings.table, plot)


def _train_one(settings, state, row: Row, base_row: dict, label: str) -> None:
    entry = state["rows"][row.id]
    if entry["status"] == "finished" or (entry["status"] == "failed" and not settings.retry_failed):
        print(f"{label} {row.id}: {entry['status']} before, skipped", flush=True)
        return
    values, why = _values(settings, row, base_row)
    entry["values"] = values
    if why:
        entry.update(status="failed", error=why)
    else:
        print(f"{label} {row.id}: training ({' '.join(row.overrides) or 'the base'})", flush=True)
        _run_row(settings, state, entry, values)
    write_state(settings.output, state)
    if entry["status"] == "finished":
        r = entry["result"]
        print(
            f"{label} {row.id}: val PPL {r['val_perplexity']:.2f}, val BLEU {r['val_bleu']:.2f}, "
            f"{r['minutes']:.1f} min, {r['updates']} updates",
            flush=True,
        )
    else:
        print(f"{label} {row.id}: failed: {entry['error']}", flush=True)
