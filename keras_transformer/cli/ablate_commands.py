"""``keras-transformer ablate``: Table 3 of the paper over one base config (``table3/``)."""

from __future__ import annotations

import json
import signal
import sys


def add_ablate(commands, parent):
    p = commands.add_parser(
        "ablate",
        parents=[parent],
        help="train the variations of Table 3 over one base config at one budget per row and "
        "write the table (keras_transformer.table3.ablate)",
        description="Each row trains in its own run OUTPUT/<row> through a fresh "
        "`keras-transformer train` process, then is scored on the whole validation split. "
        "Rerun the same command after a kill: finished rows are skipped, the unfinished one "
        "resumes, failed ones are retried with --retry-failed. Exit status 1 when a row failed.",
    )
    p.add_argument(
        "--plan",
        default=None,
        help="plan file (YAML): config, output, steps or "
        "minutes, seeds, rows, overrides, table; the flags below override it",
    )
    p.add_argument("--config", default=None, help="the base config, e.g. configs/multi30k.yaml")
    p.add_argument("--output", default=None, help="folder of the rows' runs and ablation.json")
    p.add_argument(
        "--rows",
        default=None,
        help="comma-separated groups (A,B,C,D,E,R) or row ids (A-h1,D-ls0); default: all. "
        "The base row always runs",
    )
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--steps", type=int, default=None, help="the same updates for every row")
    budget.add_argument(
        "--minutes", type=float, default=None, help="the same training minutes for every row"
    )
    p.add_argument("--seeds", type=int, default=None, help="seeds of the base row (default 3)")
    p.add_argument(
        "--table",
        default=None,
        help="Markdown table (default OUTPUT/table3.md); the plot is written next to it as .png",
    )
    p.add_argument(
        "--beam-size", type=int, default=None, help="decoding for val BLEU (default 1: greedy)"
    )
    p.add_argument("--retry-failed", action="store_true", help="train failed rows again")
    p.add_argument(
        "--list", action="store_true", help="print the rows and their overrides; train nothing"
    )
    p.add_argument(
        "overrides",
        nargs="*",
        help="section.field=value overrides for every row (replace the plan's overrides:)",
    )
    p.set_defaults(check=_check_ablate, func=_ablate)


def _common(args) -> dict:
    return dict(
        config=args.config,
        rows=args.rows.split(",") if args.rows else None,
        steps=args.steps,
        minutes=args.minutes,
        seeds=args.seeds,
        overrides=args.overrides or None,
        plan=args.plan,
    )


def _check_ablate(args) -> dict:
    """Before TensorFlow: the plan (base config, rows, seeds, overrides), as ``--list`` gives it."""
    from keras_transformer.cli.common import CommandError
    from keras_transformer.table3.ablate import ablation_plan

    try:
        return {"plan": ablation_plan(**_common(args))}
    except (FileNotFoundError, ValueError) as error:
        raise CommandError(str(error)) from error


def _ablate(args, plan):
    from keras_transformer.cli.common import CommandError
    from keras_transformer.table3.ablate import AblationInterrupted, ablate

    common = _common(args)
    try:
        if args.list:
            for row in plan:
                print(json.dumps(row))
            return 0
        result = ablate(
            output=args.output,
            table=args.table,
            retry_failed=args.retry_failed,
            beam_size=args.beam_size,
            **common,
        )
    except AblationInterrupted as stop:
        print(f"keras-transformer ablate: interrupted: {stop}", file=sys.stderr)
        return 128 + signal.SIGTERM
    except (FileNotFoundError, ValueError) as error:
        raise CommandError(str(error)) from error
    print(f"Wrote {result.table}" + (f" and {result.plot}" if result.plot else ""))
    if result.failed:
        print(
            f"keras-transformer ablate: {len(result.failed)} row(s) failed: "
            f"{', '.join(result.failed)} (see the table; --retry-failed trains them again)",
            file=sys.stderr,
        )
        return 1
    return 0
