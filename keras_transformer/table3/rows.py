# Paper section 6.2, Table 3: "we varied our base model in different ways, measuring the change in
# performance on English-to-German translation on the development set, newstest2013".
"""The rows of Table 3 as overrides of one base config, each with the paper's finding beside it,
and the plan file that names a base config, a budget and rows.

Rows vary around the base config's own values (its model section resolved), the way the
paper's rows vary around its base model (N=6, d_model=512, d_ff=2048, h=8, d_k=d_v=64,
P_drop=0.1, eps_ls=0.1):

- ``A`` heads h in 1, 2, 4, 8, 16 with d_k = d_v = d_model / h (constant compute);
- ``B`` key size d_k of the base / 4 and / 2 with h and d_v fixed (``model.key_dim``, with
  ``model.value_dim`` held at the base's d_v; the paper's 16 and 32 of 64, its d_v staying 64);
- ``C`` N - 1 and N + 1, d_model / 2 and * 2 (h fixed, so d_k follows), d_ff / 2 and * 2;
- ``D`` P_drop 0, 0.1, 0.2, 0.3 and eps_ls 0, 0.1, 0.2 (the base's own values left out);
- ``E`` learned positional embeddings instead of sinusoids, from Glorot's start and from a
  normal start at the sinusoids' scale (``model.positional_stddev`` = sqrt(1/2));
- ``R`` local restricted self-attention, r in 4, 8, 16 (``model.attention_window``; section 4
  proposes it, Table 3 has no such row).

The base row runs with ``seeds`` seeds (``training.seed`` and ``data.shuffle_seed`` + k): their
standard deviation is the run-to-run noise the other rows are read against (``table.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib

from keras_transformer.config import load_mapping
from keras_transformer.training.run_config import TrainingConfig

__all__ = ["GROUPS", "Row", "base_values", "load_plan", "plan_rows", "row_values"]

GROUPS = ("A", "B", "C", "D", "E", "R")
PLAN_KEYS = {
    "config",
    "output",
    "table",
    "steps",
    "minutes",
    "seeds",
    "rows",
    "overrides",
    "beam_size",
}
# The root mean square of the sinusoids of section 3.5 (half sines, half cosines): sqrt(1/2).
SINUSOID_RMS = 0.7071
# Table 3's base row and its findings (newstest2013 PPL / BLEU; 65M parameters).
PAPER_BASE = "base (N=6, d_model 512, h=8): PPL 4.92, BLEU 25.8, 65M params"
PAPER_FINDINGS = {
    "A": "single-head attention is 0.9 BLEU worse than the best setting; too many heads hurt too",
    "B": "reducing the attention key size d_k hurts model quality",
    "C": "bigger models are better",
    "D": "dropout is very helpful in avoiding over-fitting; label smoothing hurts perplexity "
    "but improves BLEU",
    "E": "learned positional embeddings: nearly identical results to sinusoids",
    "R": "not measured in the paper (section 4 proposes it for very long sequences)",
}


@dataclasses.dataclass(frozen=True)
class Row:
    """One row: its id (``base``, ``A-h1``, ...), group letter, the overrides of the base config
    it trains with (seeds included, budget not), and the paper's finding beside it."""

    id: str
    group: str
    overrides: tuple[str, ...]
    paper: str = ""

    def to_dict(self) -> dict:
        return {"id": self.id, "group": self.group, "overrides": list(self.overrides)}


def base_values(config: TrainingConfig) -> dict:
    """Table 3's columns of ``config``: N, d_model, d_ff, h, d_k, d_v, P_drop, eps_ls, plus the
    positional encoding and the restricted-attention window (``None``: full)."""
    return row_values(config.model.to_dict(), config.training.label_smoothing, config.data)


def row_values(model: dict, label_smoothing: float, data=None) -> dict:
    """Table 3's columns of a ``model:`` section (a preset and its fields) and eps_ls."""
    resolved = _resolved_model(model, data)
    d_k = resolved.get("key_dim") or resolved["d_model"] // resolved["num_heads"]
    d_v = resolved.get("value_dim") or d_k
    return {
        "N": resolved["num_layers"],
        "d_model": resolved["d_model"],
        "d_ff": resolved["d_ff"],
        "h": resolved["num_heads"],
        "d_k": d_k,
        "d_v": d_v,
        "P_drop": resolved["dropout"],
        "eps_ls": label_smoothing,
        "positional": resolved["positional"],
        "positional_stddev": resolved.get("positional_stddev"),
        "window": resolved.get("attention_window"),
    }


def _resolved_model(model: dict, data=None) -> dict:
    """The model config a ``model:`` section builds (its preset applied, the vocabulary of
    ``data`` or 8,000)."""
    from keras_transformer.config import ModelSettings

    vocab = (data.vocab_size if data is not None else None) or 8000
    settings = ModelSettings.from_dict(dict(model))
    return settings.model_config(settings.source_vocab_size or vocab).to_dict()


def _fmt(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _fixed_head_sizes(config: TrainingConfig) -> set:
    """Which of ``key_dim`` and ``value_dim`` the base's model sets (itself or by its preset),
    even where the value equals the default's d_model / h: those would stay fixed as h moves."""
    resolved = _resolved_model(config.model.to_dict(), config.data)
    return {name for name in ("key_dim", "value_dim") if resolved.get(name) is not None}


def _heads(base: dict, fixed: set = frozenset()) -> list[Row]:
    """(A): d_k = d_v = d_model / h; the paper's h = 1, 4, 16, 32 around its 8, by ratio.
    ``fixed``: the head sizes the base sets (``_fixed_head_sizes``), set back to follow h."""
    single = "h=1: 5.29, 24.9 (single head: 0.9 BLEU below the best)"
    paper = {1 / 4: single, 1 / 2: "h=4: 5.00, 25.5 (fewer heads: worse)"}
    paper.update({2: "h=16: 4.91, 25.8 (as good as h=8)", 4: "h=32: 5.01, 25.4 (too many: worse)"})
    rows = []
    for h in (1, 2, 4, 8, 16):
        if h == base["h"]:
            continue
        ratio = min(paper, key=lambda r: abs(r - h / base["h"]))
        overrides = [f"model.num_heads={h}"]
        overrides += [f"model.{name}=null" for name in ("key_dim", "value_dim") if name in fixed]
        rows.append(Row(f"A-h{h}", "A", tuple(overrides), f"paper {paper[ratio]}"))
    return rows


def _key_size(base: dict) -> list[Row]:
    """(B): d_k reduced with h and d_v fixed (the paper's 16 and 32 of 64; its d_v stays 64)."""
    paper = {4: "d_k=16: 5.16, 25.1, 58M (hurts)", 2: "d_k=32: 5.01, 25.4, 60M (hurts)"}
    rows = []
    for divisor in (4, 2):
        d_k = base["d_k"] // divisor
        if d_k >= 1:
            overrides = (f"model.key_dim={d_k}", f"model.value_dim={base['d_v']}")
            rows.append(Row(f"B-dk{d_k}", "B", overrides, f"paper {paper[divisor]}"))
    return rows


def _size(base: dict) -> list[Row]:
    """(C): N, d_model (h fixed, so d_k = d_model / h follows) and d_ff, smaller and bigger."""
    n, d, ff = base["N"], base["d_model"], base["d_ff"]
    choices = [
        ("N", "num_layers", n - 1, "N=4: 5.19, 25.3; N=2: 6.11, 23.7 (smaller: worse)"),
        ("N", "num_layers", n + 1, "N=8: 4.88, 25.5 (bigger: better PPL)"),
        ("d", "d_model", d // 2, "d_model=256: 5.75, 24.5, 28M (smaller: worse)"),
        ("d", "d_model", d * 2, "d_model=1024: 4.66, 26.0, 168M (bigger: better)"),
        ("ff", "d_ff", ff // 2, "d_ff=1024: 5.12, 25.4, 53M (smaller: worse)"),
        ("ff", "d_ff", ff * 2, "d_ff=4096: 4.75, 26.2, 90M (bigger: better)"),
    ]
    rows = []
    for tag, field, value, paper in choices:
        if value >= 1:
            rows.append(Row(f"C-{tag}{value}", "C", (f"model.{field}={value}",), f"paper {paper}"))
    return rows


def _regularization(base: dict) -> list[Row]:
    """(D): dropout and label smoothing, the base's own values left out (that is the base)."""
    paper_drop = {0.0: "P_drop=0.0: 5.77, 24.6 (over-fits)", 0.2: "P_drop=0.2: 4.95, 25.5"}
    paper_drop[0.1] = "P_drop=0.1 is the base: 4.92, 25.8"
    paper_ls = {0.0: "eps_ls=0.0: 4.67, 25.3 (better PPL, worse BLEU)"}
    paper_ls.update({0.2: "eps_ls=0.2: 5.47, 25.7 (worse PPL)", 0.1: "eps_ls=0.1 is the base"})
    rows = []
    for p in (0.0, 0.1, 0.2, 0.3):
        if p != base["P_drop"]:
            note = paper_drop.get(p, "no such row (the big model used P_drop=0.3)")
            rows.append(Row(f"D-drop{_fmt(p)}", "D", (f"model.dropout={p}",), f"paper {note}"))
    for eps in (0.0, 0.1, 0.2):
        if eps != base["eps_ls"]:
            note = paper_ls[eps]
            rows.append(
                Row(f"D-ls{_fmt(eps)}", "D", (f"training.label_smoothing={eps}",), f"paper {note}")
            )
    return rows


def _positional(base: dict) -> list[Row]:
    """(E): learned positional embeddings instead of sinusoids (or the other way round); the
    learned table from Keras' Glorot start and from a normal start with the sinusoids' root
    mean square, sqrt(1/2) (Glorot's is about ten times smaller at these table sizes)."""
    note = "paper 4.92, 25.7 (nearly identical to sinusoids)"
    if base["positional"] == "learned":
        overrides = ("model.positional=sinusoidal", "model.positional_stddev=null")
        return [Row("E-sinusoidal", "E", overrides, note)]
    matched = ("model.positional=learned", f"model.positional_stddev={SINUSOID_RMS}")
    return [
        Row("E-learned", "E", ("model.positional=learned",), note),
        Row("E-learned-rms", "E", matched, note),
    ]


def _window(base: dict) -> list[Row]:
    """(R): local restricted self-attention with window r (not in Table 3)."""
    rows = []
    for r in (4, 8, 16):
        note = "paper: no such row (section 4 proposes it)"
        rows.append(Row(f"R-r{r}", "R", (f"model.attention_window={r}",), note))
    return rows


_GROUP_ROWS = {
    "A": _heads,
    "B": _key_size,
    "C": _size,
    "D": _regularization,
    "E": _positional,
    "R": _window,
}


def _base_rows(seeds: int, config: TrainingConfig) -> list[Row]:
    rows = [Row("base", "base", (), PAPER_BASE)]
    seed, shuffle = config.training.seed, config.data.shuffle_seed
    for k in range(1, seeds):
        overrides = (f"training.seed={seed + k}", f"data.shuffle_seed={shuffle + k}")
        rows.append(Row(f"base-s{k}", "base", overrides, PAPER_BASE))
    return rows


def _custom_row(spec: dict, where: str) -> Row:
    """A row given in a plan as ``{id: NAME, overrides: [section.field=value, ...]}``."""
    unknown = sorted(set(spec) - {"id", "overrides", "paper"})
    if unknown or "id" not in spec:
        raise ValueError(f"{where}: a custom row is {{id: NAME, overrides: [...]}}, got {spec!r}")
    overrides = spec.get("overrides") or []
    if isinstance(overrides, str) or not all(isinstance(o, str) for o in overrides):
        raise ValueError(f"{where}: row {spec['id']!r}: overrides must be a list of strings")
    return Row(str(spec["id"]), "custom", tuple(overrides), str(spec.get("paper", "")))


def plan_rows(config: TrainingConfig, rows=None, seeds: int = 3, where: str = "--rows") -> list:
    """The rows to train, in Table 3's order: the base with ``seeds`` seeds, then each group
    or row id named in ``rows`` (``None``: every group), then custom rows (mappings).

    >>> config = TrainingConfig.load("configs/multi30k.yaml")
    >>> [row.id for row in plan_rows(config, ["A", "D-ls0"], seeds=2)]
    ['base', 'base-s1', 'A-h1', 'A-h2', 'A-h8', 'A-h16', 'D-ls0']
    """
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"seeds={seeds!r}: must be an integer >= 1")
    base = base_values(config)
    builders = {**_GROUP_ROWS, "A": functools.partial(_heads, fixed=_fixed_head_sizes(config))}
    standard = [row for group in GROUPS for row in builders[group](base)]
    by_id = {row.id: row for row in standard}
    wanted = list(GROUPS if rows is None else rows)
    chosen, custom = set(), []
    for item in wanted:
        if isinstance(item, dict):
            custom.append(_custom_row(item, where))
        elif item in GROUPS:
            chosen.update(row.id for row in standard if row.group == item)
        elif item in by_id:
            chosen.add(item)
        elif item != "base":
            known = ", ".join([*GROUPS, *by_id])
            raise ValueError(f"{where}: unknown row {item!r}; known: base, {known}")
    picked = [*_base_rows(seeds, config), *(r for r in standard if r.id in chosen), *custom]
    ids = [row.id for row in picked]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ValueError(f"{where}: row id(s) {duplicates} given twice")
    return picked


def load_plan(path) -> dict:
    """A plan file's settings (the keyword arguments of ``ablate``), checked by name.

    Example plan (``configs/table3_multi30k.yaml``)::

        config: configs/multi30k.yaml   # the base config every row overrides
        output: runs/table3
        steps: 600                      # same updates per row (or minutes: 6, same minutes)
        seeds: 2
        rows: [A, B, C, D, E, R, {id: h3, overrides: [model.num_heads=3]}]
    """
    values = load_mapping(path)
    unknown = sorted(set(values) - PLAN_KEYS)
    if unknown:
        raise ValueError(f"{path}: unknown plan key(s) {unknown}; known: {sorted(PLAN_KEYS)}")
    rows = values.get("rows")
    if rows is not None and not isinstance(rows, list):
        raise ValueError(f"{path}: rows must be a list of groups, row ids or custom rows")
    overrides = values.get("overrides") or []
    if isinstance(overrides, str) or not all(isinstance(o, str) for o in overrides):
        raise ValueError(f"{path}: overrides must be a list of section.field=value strings")
    values["overrides"] = list(overrides)
    for key in ("config", "output", "table"):
        if values.get(key) is not None:
            values[key] = str(pathlib.Path(values[key]))
    return values
