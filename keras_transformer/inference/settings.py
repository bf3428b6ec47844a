# Paper section 6.1 (Machine Translation): "beam search with a beam size of 4 and length penalty
# alpha = 0.6 ... maximum output length during inference to input length + 50".
"""The settings of inference, each written once: its default, its check, its help text and the
export formats that take it.

* :class:`SearchSettings`: how the one search decodes (the run config's ``search`` section);
* :class:`ServingSettings`: what an export does around the search (the ``export`` section):
  the format, input limits, the request's token budget, the dtype.

Both are frozen dataclasses that check themselves when made. Everything else follows from their
fields: the YAML sections (``training/run_config.py``), the ``keras-transformer export`` flags
(:func:`add_flags`, :func:`given_flags`), the keywords of :class:`~keras_transformer.Searcher`,
:class:`~keras_transformer.Translator` and :func:`~keras_transformer.export_ctranslate2`
(:func:`split_settings`), and the ``translator.json`` each export writes (:func:`record`).
Adding a switch is one field here and the code that reads it.

This module imports no TensorFlow (the command line checks its flags before TensorFlow loads).

Example:

>>> search = SearchSettings(beam_size=1)
>>> search.alpha, search.max_extra_length
(0.6, 50)
>>> SearchSettings(beam_size=0)
Traceback (most recent call last):
...
ValueError: search.beam_size=0: must be >= 1
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from keras_transformer.text.vocabulary import BOS_ID, EOS_ID, PAD_ID, UNK_ID

__all__ = [
    "EXPORT_FORMATS",
    "SAMPLING_FIELDS",
    "QUANTIZATIONS",
    "SearchSettings",
    "ServingSettings",
    "add_flags",
    "given_flags",
    "record",
    "split_settings",
]

EXPORT_FORMATS = ("saved_model", "ctranslate2")
QUANTIZATIONS = ("float32", "int16", "int8")
BOTH = EXPORT_FORMATS


def setting(
    default,
    help: str,
    *,
    least: int | float | None = None,
    choices: tuple | None = None,
    none_if_zero: bool = False,
    formats: tuple[str, ...] = BOTH,
    flags: tuple[str, ...] | None = None,
    recorded: bool = True,
):
    """A settings field: ``default``; ``help`` (the flag's text); ``least`` (the smallest value
    allowed) or ``choices``; ``none_if_zero`` (0 means "no limit", stored as None);
    ``formats`` (the export formats that take it); ``flags`` (a switch's on and off flags,
    default ``--field-name`` and, for a bool, ``--no-field-name``); ``recorded``: whether the
    export's ``translator.json`` holds it. A ``tuple[str, ...]`` field is a list of names (in
    YAML a list, on the command line one or more words after its flag)."""
    meta = dict(
        help=help,
        least=least,
        choices=choices,
        none_if_zero=none_if_zero,
        formats=formats,
        flags=flags,
        recorded=recorded,
    )
    return dataclasses.field(default=default, metadata=meta)


def _coerce(field, value, name):
    """An int field's integral float as an int, a float field's int as a float, a list of
    names as a tuple."""
    if _is_names(field):
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, (list, tuple)) or not all(
            isinstance(item, str) and item.strip() for item in names
        ):
            raise ValueError(f"{name}={value!r}: expected a list of names")
        return tuple(names)
    kind = _type(field)
    if value is None or isinstance(value, bool) or kind is str:
        return value
    if kind is int and isinstance(value, float) and value.is_integer():
        return int(value)
    if kind is float and isinstance(value, int):
        return float(value)
    if kind is int and not isinstance(value, int):
        raise ValueError(f"{name}={value!r}: expected an integer")
    return value


class _Checked:
    """Checks and normalizes the fields of a frozen settings dataclass when it is made."""

    section = ""  # the run config's section, named in errors

    def __post_init__(self):
        for field in dataclasses.fields(self):
            meta, value = field.metadata, getattr(self, field.name)
            name = f"{self.section}.{field.name}"
            if meta["none_if_zero"] and value == 0 and not isinstance(value, bool):
                value = None
            value = _coerce(field, value, name)
            if meta["choices"] is not None and value not in meta["choices"]:
                raise ValueError(f"{name}={value!r}: expected one of {list(meta['choices'])}")
            if value is not None and meta["least"] is not None:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise ValueError(f"{name}={value!r}: expected a number")
                if value < meta["least"]:
                    zero = " (0: no limit)" if meta["none_if_zero"] else ""
                    raise ValueError(f"{name}={value!r}: must be >= {meta['least']}{zero}")
            object.__setattr__(self, field.name, value)

    def replace(self, **changes):
        """A copy with ``changes`` (field names) applied and checked."""
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class SearchSettings(_Checked):
    """How the search decodes (``inference/search.py``); the run config's ``search`` section.

    ``jit_compile``, ``xla_max_batch``, ``drop_finished``, ``share_cross_cache``,
    ``fast_top_k`` and ``xla_length_multiple`` are speed switches of our search: each gives the
    same outputs as its plain form (tested), and only the SavedModel takes them.
    """

    section = "search"

    beam_size: int = setting(4, "hypotheses kept per sentence (paper: 4); 1 is greedy", least=1)
    alpha: float = setting(
        0.6, "GNMT length penalty ((5 + |y|) / 6) ** alpha (paper: 0.6)", least=0
    )
    max_extra_length: int = setting(
        50, "output cap: source length + this many subwords (paper: 50)", least=0
    )
    max_output_length: int | None = setting(
        None, "absolute output cap in subwords (0: none)", least=1, none_if_zero=True
    )
    no_repeat_ngram_size: int = setting(
        0,
        "never emit an n-gram of this size twice in one translation (0: off); a guard against "
        "the loops of bad input (fairseq's and CTranslate2's no_repeat_ngram_size)",
        least=0,
    )
    sampling_topk: int = setting(
        1,
        "sample each token among the K most probable (0: all; 1: no sampling, the search of "
        "beam_size); back-translation samples (Edunov et al. 2018)",
        least=0,
    )
    sampling_topp: float = setting(
        1.0,
        "sample among the fewest most probable tokens whose probability reaches P (nucleus; "
        "1: no cut; needs sampling_topk != 1)",
        least=0,
    )
    sampling_temperature: float = setting(
        1.0, "sample from softmax(log P / T) (1: the model's distribution)", least=0
    )
    seed: int = setting(
        0,
        "seed of the samples: the same seed, input and settings give the same samples",
        least=0,
    )
    ensemble_average: str = setting(
        "log_probs",
        "how an ensemble's members combine at each step: log_probs (the mean of their "
        "log-probabilities) or probs (the log of their mean probability)",
        choices=("log_probs", "probs"),
        formats=("saved_model",),
    )
    jit_compile: bool = setting(False, "XLA-compile the search loop", formats=("saved_model",))
    xla_max_batch: int | None = setting(
        None,
        "XLA-compile the search of batches of up to N sentences only (0: none)",
        least=1,
        none_if_zero=True,
        formats=("saved_model",),
    )
    drop_finished: bool = setting(
        True,
        "finished sentences leave the batch as the search goes (--keep-finished: the plain "
        "loop, every row to the end; XLA runs the plain loop)",
        formats=("saved_model",),
        flags=("--drop-finished", "--keep-finished"),
    )
    share_cross_cache: bool = setting(
        True,
        "beam search keeps one copy of a sentence's encoder-decoder keys/values "
        "(--repeat-cross-cache: a copy per hypothesis, the plain form)",
        formats=("saved_model",),
        flags=("--share-cross-cache", "--repeat-cross-cache"),
    )
    fast_top_k: bool = setting(
        True,
        "pick the best tokens by a top-k over blocks of the vocabulary (--plain-top-k: "
        "log_softmax and top_k over all of it)",
        formats=("saved_model",),
        flags=("--fast-top-k", "--plain-top-k"),
    )
    xla_length_multiple: int = setting(
        16,
        "with XLA, sources are padded to a multiple of this width (a compile per width)",
        least=1,
        formats=("saved_model",),
    )

    def __post_init__(self):
        super().__post_init__()
        if not 0 < self.sampling_topp <= 1:
            raise ValueError(f"search.sampling_topp={self.sampling_topp}: must be in (0, 1]")
        if self.sampling_temperature <= 0:
            raise ValueError(
                f"search.sampling_temperature={self.sampling_temperature}: must be > 0"
            )
        if self.sampling_topk == 1 and self.sampling_topp < 1:
            raise ValueError(
                f"search.sampling_topp={self.sampling_topp} with sampling_topk=1 (no sampling): "
                "give sampling_topk 0 to sample from the whole nucleus"
            )
        if self.sampling and self.beam_size != 1:
            raise ValueError(
                f"search.sampling_topk={self.sampling_topk} with beam_size={self.beam_size}: "
                "sampling draws one token per step; set beam_size 1"
            )

    @property
    def sampling(self) -> bool:
        """True when the search samples (``sampling_topk != 1``)."""
        return self.sampling_topk != 1


@dataclasses.dataclass(frozen=True)
class ServingSettings(_Checked):
    """What an export does around the search; the run config's ``export`` section.

    Input handling and its limits are described in ``inference/saved_model.py``; the
    CTranslate2 folder does the same in Python (``inference/text.py``).
    """

    section = "export"

    format: str = setting(
        "saved_model",
        "saved_model (TensorFlow) or ctranslate2 (the CTranslate2 engine; the [ctranslate2] extra)",
        choices=EXPORT_FORMATS,
    )
    quantization: str = setting(
        "float32",
        "weight type of a CTranslate2 folder",
        choices=QUANTIZATIONS,
        formats=("ctranslate2",),
    )
    max_source_length: int | None = setting(
        None,
        "source subwords kept, EOS included (0: the model's positional table)",
        least=2,
        none_if_zero=True,
    )
    max_input_chars: int | None = setting(
        None,
        "characters of each input kept before tokenizing (0: 32 x max_source_length)",
        least=1,
        none_if_zero=True,
    )
    max_batch_tokens: int | None = setting(
        4096,
        "search a request in sub-batches of at most this many source subwords: bounded memory "
        "for any request size (0: no limit)",
        least=1,
        none_if_zero=True,
    )
    dtype: str | None = setting(
        None,
        "serve under this Keras dtype policy, e.g. bfloat16 (none: the model's own)",
        formats=("saved_model",),
    )
    ensemble: tuple[str, ...] = setting(
        (),
        "more runs of the exported run's tokenizer, decoded with it as one ensemble (their "
        "next-token distributions combined at each step: search.ensemble_average), each with "
        "the same weights choice (for `keras-transformer export`; in Python pass the models: "
        "Translator(..., ensemble=[...]))",
        formats=("saved_model",),
        flags=("--ensemble",),
        recorded=False,
    )

    def resolved(self, dims: dict) -> ServingSettings:
        """The limits a model of ``dims`` (``model_dims``) serves with: ``max_source_length``
        the model's positions unless fewer are asked (never more than a learned table's rows),
        ``max_input_chars`` 32 characters per source subword unless given."""
        length = self.max_source_length
        if length is None:
            length = dims["max_positions"]
        elif dims["max_source_positions"] is not None:
            length = min(length, dims["max_source_positions"])
        return self.replace(
            max_source_length=length, max_input_chars=self.max_input_chars or 32 * length
        )


# The settings a translate request may give an export (the export's record holds the defaults).
SAMPLING_FIELDS = ("sampling_topk", "sampling_topp", "sampling_temperature", "seed")


def sampling_request(exported: dict, **given) -> SearchSettings:
    """The sampling of a request to an export whose ``translator.json`` record is ``exported``:
    ``given`` (fields of ``SAMPLING_FIELDS``, None: not given) over the export's own values;
    checked (``.sampling`` is False when neither asks to sample: top-k 1)."""
    values = {name: exported.get(name, getattr(SearchSettings, name)) for name in SAMPLING_FIELDS}
    values.update({name: value for name, value in given.items() if value is not None})
    unknown = sorted(set(given) - set(SAMPLING_FIELDS))
    if unknown:
        raise TypeError(f"sampling: unknown setting(s) {unknown}")
    return SearchSettings(beam_size=1, **values)


def field_names(klass) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(klass))


def split_settings(
    search: SearchSettings | None = None,
    serving: ServingSettings | None = None,
    caller: str = "settings",
    **changes,
) -> tuple[SearchSettings, ServingSettings]:
    """``(search, serving)`` with ``changes`` (any field of either, by name) applied; an
    unknown name is a ``TypeError`` naming ``caller``."""
    search, serving = search or SearchSettings(), serving or ServingSettings()
    unknown = sorted(set(changes) - set(field_names(SearchSettings) + field_names(ServingSettings)))
    if unknown:
        raise TypeError(f"{caller}: unknown setting(s) {unknown}")
    mine = lambda klass: {k: v for k, v in changes.items() if k in field_names(klass)}
    return search.replace(**mine(SearchSettings)), serving.replace(**mine(ServingSettings))


def record(search: SearchSettings, serving: ServingSettings, **extra) -> dict[str, Any]:
    """The ``translator.json`` record of an export: the settings its format takes, ``extra``
    (the model's limits), then the reserved ids."""
    values = {}
    for settings in (search, serving):
        for field in dataclasses.fields(settings):
            if serving.format in field.metadata["formats"] and field.metadata["recorded"]:
                values[field.name] = getattr(settings, field.name)
    ids = dict(pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID)
    return {**values, **extra, **ids}


# ------------------------------------------------------------------ command-line flags
def _flags(field) -> tuple[str, ...]:
    flags = field.metadata["flags"]
    if flags:
        return flags
    flag = "--" + field.name.replace("_", "-")
    return (flag, "--no-" + flag[2:]) if field.type in ("bool", bool) else (flag,)


def _is_names(field) -> bool:
    return str(field.type).startswith("tuple[str")


def _type(field):
    annotation = str(field.type)
    for name, kind in (("int", int), ("float", float)):
        if annotation.startswith(name):
            return kind
    return str


def add_flags(
    parser: argparse.ArgumentParser,
    klass,
    defaults_from: str = "",
    exports: bool = False,
    names: tuple[str, ...] | None = None,
) -> None:
    """A flag for every field of ``klass`` (or those ``names``; a switch: an on and an off
    flag), each storing under the field's name, ``None`` when not given (so a config file's
    value stands). ``defaults_from`` names where a missing flag's value comes from, for the help
    text; ``exports``: the help says which export formats take each setting."""
    for field in dataclasses.fields(klass):
        if names is not None and field.name not in names:
            continue
        meta = field.metadata
        where = f"{klass.section}.{field.name}"
        default = f"default: {defaults_from}'s {where}, else " if defaults_from else "default: "
        shown = "none" if field.default in (None, ()) else field.default
        text = f"{meta['help']} ({default}{shown})"
        if exports and meta["formats"] != BOTH:
            text += f"; {' and '.join(meta['formats'])} only"
        flags = _flags(field)
        if len(flags) == 2:
            group = parser.add_mutually_exclusive_group()
            group.add_argument(
                flags[0], dest=field.name, action="store_const", const=True, help=text
            )
            group.add_argument(flags[1], dest=field.name, action="store_const", const=False)
        elif _is_names(field):
            parser.add_argument(flags[0], dest=field.name, nargs="+", metavar="NAME", help=text)
        else:
            kind = _type(field)
            metavar = None if meta["choices"] else {int: "N", float: "X", str: "NAME"}[kind]
            parser.add_argument(
                flags[0],
                dest=field.name,
                type=kind,
                choices=meta["choices"],
                metavar=metavar,
                help=text,
            )
        parser.set_defaults(**{field.name: None})


def given_flags(args: argparse.Namespace, klass) -> dict[str, Any]:
    """The fields of ``klass`` whose flags were given: ``{field: value}``."""
    values = {name: getattr(args, name, None) for name in field_names(klass)}
    return {name: value for name, value in values.items() if value is not None}


def flag_of(klass, name: str, value=None) -> str:
    """The flag that sets field ``name`` (to ``value``, for a switch)."""
    field = {f.name: f for f in dataclasses.fields(klass)}[name]
    flags = _flags(field)
    return flags[1] if len(flags) == 2 and value is False else flags[0]


def foreign_settings(search: SearchSettings, serving: ServingSettings) -> list[tuple]:
    """``(class, field name, value)`` of the settings that differ from their default and that
    ``serving.format`` does not take."""
    found = []
    for settings in (search, serving):
        plain = type(settings)()
        for field in dataclasses.fields(settings):
            value = getattr(settings, field.name)
            if serving.format not in field.metadata["formats"] and value != getattr(
                plain, field.name
            ):
                found.append((type(settings), field.name, value))
    return found
