"""The settings of one ablation: the base config, the output folder, the budget per row (the same
updates or the same minutes), the base seeds, the common overrides, from arguments over a plan
file; and the lines above its table (what was run and how it was scored)."""

from __future__ import annotations

import dataclasses
import hashlib
import pathlib
import shlex

from keras_transformer.table3.rows import load_plan
from keras_transformer.training.run_config import TrainingConfig

__all__ = ["AblationSettings", "load_base", "resolve_settings", "table_header"]


@dataclasses.dataclass
class AblationSettings:
    """One ablation's settings, resolved (``resolve_settings``); ``fingerprint`` is what every
    row of one output folder shares."""

    config: str
    output: pathlib.Path
    table: pathlib.Path
    budget: dict
    seeds: int
    overrides: list
    beam_size: int
    rows: list | None
    retry_failed: bool = False
    plan: str | None = None

    def budget_overrides(self, base: TrainingConfig) -> list[str]:
        """Same updates: ``max_steps``, no clock, and an epoch (one checkpoint and validation
        pass) of the largest size near the base's that divides it (train runs whole epochs);
        same minutes: the clock alone decides."""
        if "steps" in self.budget:
            steps, usual = self.budget["steps"], base.training.steps_per_epoch
            near = [n for n in range(max(1, usual // 2), min(usual, steps) + 1) if steps % n == 0]
            per_epoch = max(near) if near else min(usual, steps)
            return [
                f"training.max_steps={steps}",
                "training.max_minutes=null",
                f"training.steps_per_epoch={per_epoch}",
            ]
        return [f"training.max_minutes={self.budget['minutes']}", "training.max_steps=100000000"]

    def fingerprint(self) -> dict:
        """What rows of one output folder must share to be compared."""
        text = pathlib.Path(self.config).read_bytes()
        return {
            "config": self.config,
            "config_sha256": hashlib.sha256(text).hexdigest(),
            "budget": self.budget,
            "overrides": self.overrides,
            "beam_size": self.beam_size,
        }


def resolve_settings(plan=None, **given) -> AblationSettings:
    """Plan-file values, then the arguments given (not None) over them, checked."""
    values = load_plan(plan) if plan else {}
    values.update({key: value for key, value in given.items() if value is not None})
    if not values.get("config"):
        raise ValueError("give the base config (--config, or config: in the plan)")
    if not values.get("output"):
        raise ValueError("give the output folder (--output, or output: in the plan)")
    steps, minutes = values.get("steps"), values.get("minutes")
    if given.get("steps") is not None and given.get("minutes") is None:
        minutes = None  # a --steps given overrides the plan's minutes
    if given.get("minutes") is not None and given.get("steps") is None:
        steps = None
    if (steps is None) == (minutes is None):
        raise ValueError(
            "give one budget per row: --steps N (the same updates for every row) or "
            "--minutes M (the same training minutes)"
        )
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int) or steps < 1):
        raise ValueError(f"steps={steps!r} must be a positive integer")
    if minutes is not None and (isinstance(minutes, bool) or not minutes > 0):
        raise ValueError(f"minutes={minutes!r} must be a positive number")
    output = pathlib.Path(values["output"])
    return AblationSettings(
        config=str(values["config"]),
        output=output,
        table=pathlib.Path(values.get("table") or output / "table3.md"),
        budget={"steps": steps} if steps is not None else {"minutes": float(minutes)},
        seeds=values.get("seeds", 3),
        overrides=list(values.get("overrides") or []),
        beam_size=int(values.get("beam_size", 1)),
        rows=values.get("rows"),
        retry_failed=bool(values.get("retry_failed", False)),
        plan=str(plan) if plan else None,
    )


def load_base(settings: AblationSettings) -> TrainingConfig:
    try:
        return TrainingConfig.load(settings.config, settings.overrides)
    except ValueError as error:
        raise ValueError(f"the base config: {error}") from error


def table_header(settings: AblationSettings, base: TrainingConfig, base_row: dict) -> list[str]:
    from keras_transformer.training.run_config import data_path

    if "steps" in settings.budget:
        budget = (
            f"**the same number of updates per row**: training.max_steps="
            f"{settings.budget['steps']} (fair on a shared, noisy machine; minutes vary)"
        )
    else:
        budget = (
            f"**the same training minutes per row**: training.max_minutes="
            f"{settings.budget['minutes']:g} (updates vary with each row's step time)"
        )
    dims = ", ".join(f"{k}={base_row[k]}" for k in ("N", "d_model", "d_ff", "h", "d_k"))
    decoding = "greedy" if settings.beam_size == 1 else f"beam {settings.beam_size}"
    source = data_path(base.data.validation_source)
    return [
        "# Table 3 at the scale of one base config (paper section 6.2)",
        "",
        f"Variations of `{settings.config}` ({dims}, P_drop={base_row['P_drop']:g}, "
        f"eps_ls={base_row['eps_ls']:g}), each trained by `keras-transformer train` in its own "
        f"run under `{settings.output}/`.",
        f"Budget: {budget}.",
        f"Scores on the whole validation split (`{source}`, both sides): val PPL = exp(mean "
        "per-subword cross-entropy without label smoothing); val BLEU = sacreBLEU (cased, 13a) "
        f"of {decoding} translations; the final weights, no checkpoint averaging.",
        "Bold: changed from the base. The paper's numbers (PPL, BLEU on newstest2013; base "
        "model, 100k steps on 8 P100s, beam 4) give the direction of each finding, not values "
        "to match.",
        f"Command: {_command(settings)}",
    ]


def _command(settings: AblationSettings) -> str:
    """The command line that makes (or resumes) this table, in backticks."""
    command = ["keras-transformer", "ablate", *(["--plan", settings.plan] if settings.plan else [])]
    command += ["--config", settings.config, "--output", str(settings.output)]
    command += [f"--{k}" for k in settings.budget] + [f"{v:g}" for v in settings.budget.values()]
    rows = settings.rows or []
    named = [str(row) for row in rows if not isinstance(row, dict)]
    custom = [str(row.get("id")) for row in rows if isinstance(row, dict)]
    if named and not (custom and settings.plan):
        command += ["--rows", ",".join(named)]
    command += ["--seeds", str(settings.seeds), "--table", str(settings.table)]
    text = f"`{shlex.join([*command, *settings.overrides])}`"
    if custom and not settings.plan:
        text += f", plus custom rows {', '.join(custom)} (given to the Python API)"
    return text
