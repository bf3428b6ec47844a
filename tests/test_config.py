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
    assert base.key_dim == 64
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
