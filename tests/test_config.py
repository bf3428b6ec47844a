"""TransformerConfig: the paper's presets, file round trips and clear errors."""

import numpy as np
import pytest

from keras_transformer import TransformerConfig
from tests.conftest import REPO_ROOT


def test_base_and_big_presets_match_table_3():
    base = TransformerConfig.base(37000)
    assert (base.num_layers, base.d_model, base.d_ff, base.num_heads, base.dropout) == (
        6,
        512,
        2048,
        8,
        0.1,
    )
    assert base.head_dim == 64 and base.key_dim is None  # d_k = d_model / h unless set
    big = TransformerConfig.big(37000)
    assert (big.num_layers, big.d_model, big.d_ff, big.num_heads, big.dropout) == (
        6,
        1024,
        4096,
        16,
        0.3,
    )
    assert big.target_vocab_size == 37000


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_save_and_load_round_trip(tmp_path, suffix):
    config = TransformerConfig.small(8000, norm="pre", positional="learned", dropout=0.3)
    path = tmp_path / f"config{suffix}"
    config.save(path)
    assert TransformerConfig.load(path) == config


def test_load_reads_model_section_of_a_training_config(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("model:\n  source_vocab_size: 8000\n  num_layers: 3\ntraining:\n  steps: 10\n")
    assert TransformerConfig.load(path).num_layers == 3


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(d_model=500, num_heads=8), "d_model"),
        (dict(dropout=-0.1), "dropout"),
        (dict(dropout=1.0), "dropout"),
        (dict(num_layers=0), "num_layers"),
        (dict(norm="middle"), "norm"),
        (dict(positional="rotary"), "positional"),
        (dict(target_vocab_size=9000), "shared_embeddings"),
        (dict(d_ff=2.5), "d_ff"),
        (dict(key_dim=0), "key_dim"),
        (dict(key_dim=16.0), "key_dim"),
        (dict(key_dim=True), "key_dim"),
        (dict(attention_window=0), "attention_window"),
        (dict(attention_window=-3), "attention_window"),
        (dict(attention_window="8"), "attention_window"),
        (dict(d_model=500, num_heads=8, attention_window=4), "d_model"),
        (dict(value_dim=0), "value_dim"),
        (dict(positional_stddev=0.5), "positional_stddev"),  # sinusoids have no start
        (dict(positional="learned", positional_stddev=-1.0), "positional_stddev"),
    ],
)
def test_bad_values_fail_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=rf"TransformerConfig\.{field}="):
        TransformerConfig.base(8000, **overrides)


def test_unknown_field_in_file_names_file_and_field(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"source_vocab_size": 100, "num_layer": 2}')
    with pytest.raises(ValueError, match=r"bad\.json.*num_layer"):
        TransformerConfig.load(path)


def test_separate_vocabularies_allowed_when_not_shared():
    config = TransformerConfig.tiny(100, target_vocab_size=120, shared_embeddings=False)
    assert (config.source_vocab_size, config.target_vocab_size) == (100, 120)


def test_from_dict_reads_the_old_name_of_max_positions():
    old = {**TransformerConfig.tiny(100).to_dict()}
    old["max_length"] = old.pop("max_positions")
    assert TransformerConfig.from_dict(old) == TransformerConfig.tiny(100)
    with pytest.raises(ValueError, match="max_positions"):
        TransformerConfig.from_dict({**old, "max_positions": 64})


def test_model_settings_take_every_transformer_config_field_and_no_other():
    """``model:`` fields are TransformerConfig's own (one list, not a mirror): each one set
    reaches the config; an unknown one is refused by name; a field not set reads None."""
    import dataclasses

    from keras_transformer.config import PRESET_VALUES, ModelSettings

    for field in dataclasses.fields(TransformerConfig):
        value = getattr(TransformerConfig.tiny(100), field.name)
        assert getattr(ModelSettings(**{field.name: value}), field.name) == value
    assert ModelSettings().dropout is None
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['dropuot'\]"):
        ModelSettings(dropuot=0.1)
    for name, values in PRESET_VALUES.items():  # presets are data: each value reaches its config
        config = TransformerConfig.preset(name, 100)
        assert {k: getattr(config, k) for k in values} == values
        assert getattr(TransformerConfig, name)(100) == config


def test_model_settings_resolve_preset_then_overrides():
    from keras_transformer.config import ModelSettings

    settings = ModelSettings(preset="small", num_layers=2, max_positions=96)
    assert settings.model_config(8000) == TransformerConfig.small(
        8000, num_layers=2, max_positions=96
    )
    assert ModelSettings().model_config(8000) == TransformerConfig(source_vocab_size=8000)
    full = ModelSettings.from_config(TransformerConfig.tiny(100))
    assert full.model_config() == TransformerConfig.tiny(100)  # vocabulary filled in
    assert ModelSettings.from_dict(full.to_dict()) == full
    with pytest.raises(ValueError, match="source_vocab_size"):
        ModelSettings(preset="tiny").model_config()
    with pytest.raises(ValueError, match=r"model\.preset='huge'"):
        ModelSettings(preset="huge")
    with pytest.raises(ValueError, match=r"run\.yaml.*num_layer\b"):
        ModelSettings.from_dict({"num_layer": 2}, source="run.yaml")


def test_key_dim_and_attention_window_are_saved_and_old_files_load(tmp_path):
    from keras_transformer.config import ModelSettings

    config = TransformerConfig.base(8000, d_model=500, key_dim=32, attention_window=16)
    assert (config.head_dim, config.key_dim, config.attention_window) == (32, 32, 16)
    path = tmp_path / "config.yaml"
    config.save(path)
    assert "key_dim: 32" in path.read_text() and "attention_window: 16" in path.read_text()
    assert TransformerConfig.load(path) == config
    old = TransformerConfig.tiny(100).to_dict()
    del old["key_dim"], old["attention_window"]  # a file written before the fields existed
    del old["value_dim"], old["positional_stddev"]
    assert TransformerConfig.from_dict(old) == TransformerConfig.tiny(100)
    assert TransformerConfig.tiny(100, key_dim=4).value_head_dim == 4  # d_v = d_k unless set
    assert TransformerConfig.tiny(100, key_dim=4, value_dim=8).value_head_dim == 8
    settings = ModelSettings.from_dict({"preset": "small", "key_dim": 16, "attention_window": 8})
    assert settings.to_dict() == {"preset": "small", "key_dim": 16, "attention_window": 8}
    resolved = settings.model_config(4000)
    assert (resolved.head_dim, resolved.num_heads, resolved.attention_window) == (16, 4, 8)
    assert ModelSettings(preset="small").model_config(4000).head_dim == 256 // 4
    for field, value in (("key_dim", 0), ("attention_window", 2.5)):
        with pytest.raises(ValueError, match=rf"model\.{field}={value}: must be a positive"):
            ModelSettings.from_dict({"preset": "small", field: value})


def test_every_setting_reaches_the_config_the_flags_and_the_exported_record(tmp_path):
    """Each field of the two settings classes is a config field (read, saved, read back), an
    ``export`` flag that sets it, and a key of ``translator.json`` for the formats it names: a
    new setting is one field (``inference/settings.py``), nothing else to edit."""
    import argparse
    import dataclasses

    from keras_transformer.inference import settings as inference_settings
    from keras_transformer.inference.settings import SearchSettings, ServingSettings
    from keras_transformer.training import TrainingConfig

    parser = argparse.ArgumentParser()
    for klass in (SearchSettings, ServingSettings):
        inference_settings.add_flags(parser, klass)
    changed = {
        "beam_size": 1, "alpha": 1.5, "max_extra_length": 7, "max_output_length": 9,
        "no_repeat_ngram_size": 3, "sampling_topk": 5, "sampling_topp": 0.9,
        "sampling_temperature": 0.7, "seed": 11, "ensemble_average": "probs",
        "jit_compile": True, "xla_max_batch": 3, "drop_finished": False,
        "share_cross_cache": False, "fast_top_k": False, "xla_length_multiple": 8,
        "format": "ctranslate2", "quantization": "int8", "max_source_length": 20,
        "max_input_chars": 100, "max_batch_tokens": 64, "dtype": "bfloat16",
        "ensemble": ("runs/m2", "runs/m3"),
    }  # fmt: skip
    fields = {f.name for k in (SearchSettings, ServingSettings) for f in dataclasses.fields(k)}
    assert set(changed) == fields  # a new field must be added here too, with a value to try
    for klass in (SearchSettings, ServingSettings):
        for field in dataclasses.fields(klass):
            value = changed[field.name]
            flag = inference_settings.flag_of(klass, field.name, value)
            argv = [flag] if isinstance(value, bool) else [flag, str(value)]
            argv = [flag, *value] if isinstance(value, tuple) else argv  # a list of names
            given = inference_settings.given_flags(parser.parse_args(argv), klass)
            given = {k: tuple(v) if isinstance(v, list) else v for k, v in given.items()}
            assert given == {field.name: value}, flag
    path = tmp_path / "c.yaml"
    search = {k: v for k, v in changed.items() if k in SearchSettings.__dataclass_fields__}
    export = {k: v for k, v in changed.items() if k not in search}
    config = TrainingConfig.from_dict({"search": search, "export": export})
    config.save(path)
    again = TrainingConfig.load(path)
    assert dataclasses.asdict(again.search) == search
    assert dataclasses.asdict(again.export) == export
    for fmt in ("saved_model", "ctranslate2"):
        serving = again.export.replace(format=fmt)
        record = inference_settings.record(again.search, serving)
        taking = {
            f.name
            for k in (SearchSettings, ServingSettings)
            for f in dataclasses.fields(k)
            if fmt in f.metadata["formats"] and f.name != "ensemble"
        }  # export.ensemble names the runs an export loaded: not the export's setting
        ids = {"pad_id": 0, "unk_id": 1, "bos_id": 2, "eos_id": 3}  # the record ends with them
        assert set(record) == taking | set(ids) and {k: record[k] for k in ids} == ids
        assert {"beam_size", "alpha", "max_batch_tokens"} <= taking


def test_old_export_sections_load_and_limits_of_zero_are_none(tmp_path):
    """A run config written when the export section held the search's switches still loads
    (into the search section); 0 is no limit; a negative value is refused naming the file and
    the field, before any model is loaded."""
    from keras_transformer.training import TrainingConfig

    path = tmp_path / "c.yaml"
    path.write_text("export: {format: ctranslate2, quantization: int8, max_batch_tokens: 0}\n")
    config = TrainingConfig.load(path, ["export.xla_max_batch=1", "export.max_extra_length=7"])
    assert (config.export.format, config.export.quantization) == ("ctranslate2", "int8")
    assert config.export.max_batch_tokens is None  # 0: no limit
    assert (config.search.xla_max_batch, config.search.max_extra_length) == (1, 7)
    path.write_text("export: {max_extra_length: 7}\nsearch: {max_extra_length: 9}\n")
    with pytest.raises(
        ValueError, match=r"export\.max_extra_length=7 and search\.max_extra_length=9"
    ):
        TrainingConfig.load(path)  # the same setting twice, differently: refused, named
    config.save(tmp_path / "again.yaml")
    assert TrainingConfig.load(tmp_path / "again.yaml") == config
    limits = {
        "search": ("max_output_length", "xla_max_batch"),
        "export": ("max_source_length", "max_input_chars", "max_batch_tokens"),
    }
    for section, names in limits.items():
        path.write_text(f"{section}: {{{', '.join(f'{n}: 0' for n in names)}}}\n")
        loaded = getattr(TrainingConfig.load(path), section)
        assert all(getattr(loaded, name) is None for name in names)
    for section, field in (
        ("search", "max_extra_length"),
        *((s, n) for s, ns in limits.items() for n in ns),
    ):
        path.write_text(f"{section}: {{{field}: -3}}\n")
        with pytest.raises(ValueError, match=rf"c\.yaml: {section}\.{field}=-3: must be >= \d"):
            TrainingConfig.load(path)


def test_corpus_paths_do_not_depend_on_the_working_directory(tmp_path, monkeypatch):
    """Without ``KT_DATA_DIR`` a corpus path resolves beside the checkout (as the README says:
    ``../shared/data``), from any working directory; with it, under it."""
    from keras_transformer.training.run_config import data_path

    monkeypatch.delenv("KT_DATA_DIR", raising=False)
    here = data_path("multi30k/train.en")
    assert here == REPO_ROOT.parent / "shared" / "data" / "multi30k" / "train.en"
    monkeypatch.chdir(tmp_path)
    assert data_path("multi30k/train.en") == here
    monkeypatch.setenv("KT_DATA_DIR", str(tmp_path))
    assert data_path("multi30k/train.en") == tmp_path / "multi30k" / "train.en"


def test_the_learned_positions_start_at_the_scale_they_are_given():
    """positional_stddev: a normal start with that spread (sqrt(1/2): the sinusoids' root mean
    square); unset, Keras' Glorot start, an order of magnitude smaller at this table size."""
    import keras

    from keras_transformer import build_transformer
    from keras_transformer.layers.positional import sinusoidal_encoding
    from keras_transformer.model import TransformerLayers

    def table(**fields):
        keras.utils.set_random_seed(0)
        config = TransformerConfig.tiny(50, positional="learned", max_positions=512, **fields)
        layers = TransformerLayers.of(build_transformer(config))
        return layers.encoder_positional.position_embeddings.numpy()

    sinusoid_rms = float(np.sqrt(np.mean(np.square(sinusoidal_encoding(512, 32)))))
    assert abs(sinusoid_rms - np.sqrt(0.5)) < 0.01
    matched = table(positional_stddev=0.7071)
    assert abs(matched.std() - 0.7071) < 0.02 and abs(matched.mean()) < 0.02
    assert np.sqrt(np.mean(np.square(table()))) < 0.1 * sinusoid_rms  # Glorot: limit ~0.1
