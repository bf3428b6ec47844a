"""TransformerConfig: the paper's presets, file round trips and clear errors."""

import pytest

from keras_transformer import TransformerConfig


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


def test_model_settings_mirror_transformer_config():
    import dataclasses

    from keras_transformer.config import ModelSettings

    settings = {f.name for f in dataclasses.fields(ModelSettings)}
    assert settings - {"preset"} == {f.name for f in dataclasses.fields(TransformerConfig)}


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
    assert TransformerConfig.from_dict(old) == TransformerConfig.tiny(100)
    settings = ModelSettings.from_dict({"preset": "small", "key_dim": 16, "attention_window": 8})
    assert settings.to_dict() == {"preset": "small", "key_dim": 16, "attention_window": 8}
    resolved = settings.model_config(4000)
    assert (resolved.head_dim, resolved.num_heads, resolved.attention_window) == (16, 4, 8)
    assert ModelSettings(preset="small").model_config(4000).head_dim == 256 // 4
    for field, value in (("key_dim", 0), ("attention_window", 2.5)):
        with pytest.raises(ValueError, match=rf"model\.{field}={value}: must be a positive"):
            ModelSettings.from_dict({"preset": "small", field: value})


def test_export_section_round_trips_and_names_the_translators_keywords(tmp_path):
    """``export:`` is read, saved and read back; its SavedModel fields are exactly the keywords
    ``Translator`` takes (so a new serving setting cannot be left out of the config)."""
    import inspect

    from keras_transformer.export import Translator
    from keras_transformer.serving import export_ctranslate2
    from keras_transformer.training import TrainingConfig

    path = tmp_path / "c.yaml"
    path.write_text("export: {format: ctranslate2, quantization: int8, max_batch_tokens: 0}\n")
    config = TrainingConfig.load(path, ["export.xla_max_batch=1"])
    assert (config.export.format, config.export.quantization) == ("ctranslate2", "int8")
    assert (config.export.max_batch_tokens, config.export.xla_max_batch) == (0, 1)
    assert config.export.translator_settings()["max_batch_tokens"] is None  # 0: no limit
    config.save(tmp_path / "again.yaml")
    assert TrainingConfig.load(tmp_path / "again.yaml").export == config.export
    keywords = set(inspect.signature(Translator).parameters)
    by_path = {"model", "tokenizer", "target_tokenizer", "name", "beam_size", "alpha"}
    assert set(config.export.translator_settings()) == keywords - by_path
    keywords = set(inspect.signature(export_ctranslate2).parameters)
    assert set(config.export.ctranslate2_settings()) == keywords - by_path - {"path"}


def test_export_limits_of_zero_are_none_and_negative_ones_are_named(tmp_path):
    """0 is no limit in both engines' keywords; a negative limit is refused by the config,
    naming the file and the field (before any model is loaded)."""
    from keras_transformer.training import TrainingConfig
    from keras_transformer.training.run_config import ExportSettings

    limits = ("max_output_length", "max_source_length", "max_input_chars", "max_batch_tokens")
    zero = ExportSettings(**dict.fromkeys((*limits, "xla_max_batch"), 0), max_extra_length=0)
    assert all(zero.translator_settings()[name] is None for name in (*limits, "xla_max_batch"))
    assert all(zero.ctranslate2_settings()[name] is None for name in limits)
    assert zero.translator_settings()["max_extra_length"] == 0  # a length, not a limit
    given = ExportSettings(max_batch_tokens=64, max_source_length=20, quantization="int8")
    assert given.ctranslate2_settings() == {
        "quantization": "int8",
        "max_extra_length": 50,
        "max_output_length": None,
        "max_source_length": 20,
        "max_input_chars": None,
        "max_batch_tokens": 64,
    }
    path = tmp_path / "c.yaml"
    for field in ("max_extra_length", "xla_max_batch", *limits):
        path.write_text(f"export: {{{field}: -3}}\n")
        with pytest.raises(ValueError, match=rf"c\.yaml: export\.{field}=-3: must be >= 0"):
            TrainingConfig.load(path)
