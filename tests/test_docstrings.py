"""The ``>>>`` examples in the docstrings run and print what they say."""

import doctest
import importlib
import os
import pathlib

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

# Modules whose examples need nothing but the module itself.
MODULES = [
    "keras_transformer.config",
    "keras_transformer.inference.batching",
    "keras_transformer.inference.search",
    "keras_transformer.inference.settings",
    "keras_transformer.inference.strategies",
    "keras_transformer.text.files",
    "keras_transformer.distribute",
    "keras_transformer.losses",
    "keras_transformer.metrics",
    "keras_transformer.model",
    "keras_transformer.optimizers",
    "keras_transformer.precision",
    "keras_transformer.lazy",
    "keras_transformer.quiet",
    "keras_transformer.schedules",
    "keras_transformer.layers.attention",
    "keras_transformer.layers.blocks",
    "keras_transformer.layers.dropout",
    "keras_transformer.layers.embedding",
    "keras_transformer.layers.feedforward",
    "keras_transformer.layers.local_attention",
    "keras_transformer.layers.masking",
    "keras_transformer.layers.normalization",
    "keras_transformer.layers.positional",
    "keras_transformer.layers.projection",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    _run_examples(name)


def _run_examples(name):
    result = doctest.testmod(importlib.import_module(name), report=True, optionflags=FLAGS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


@pytest.fixture
def user_folder(tmp_path, monkeypatch, data_dir, multi30k_dir):
    """A working folder as a user has it after training: ``configs/`` and a run directory
    ``runs/multi30k`` with ``tokenizer/`` and ``averaged.keras`` (a tiny untrained model).

    ``train`` sets the global dtype policy (the quickstart config trains in mixed bfloat16): it is
    restored afterwards, so that later tests build float32 models."""
    import keras

    from keras_transformer import SubwordTokenizer, TransformerConfig, build_transformer

    run = tmp_path / "runs" / "multi30k"
    tokenizer = SubwordTokenizer.train(
        [multi30k_dir / "train.en", multi30k_dir / "train.de"],
        vocab_size=1000,
        output_dir=tmp_path / "tokenizer-build",
    )
    tokenizer.save(run / "tokenizer")
    model = build_transformer(TransformerConfig.tiny(vocab_size=tokenizer.vocab_size))
    model.save(run / "averaged.keras")
    keras.backend.clear_session()
    (tmp_path / "configs").symlink_to(REPO_ROOT / "configs")
    monkeypatch.setenv("KT_DATA_DIR", os.fspath(data_dir))
    monkeypatch.chdir(tmp_path)
    policy = keras.config.dtype_policy()
    yield tmp_path
    keras.config.set_dtype_policy(policy)


# Modules whose examples work on files a user has: a run directory, the configs.
@pytest.mark.parametrize(
    "name",
    [
        "keras_transformer.inference.saved_model",
        "keras_transformer.training",
        "keras_transformer.training.loop",
    ],
)
def test_docstring_examples_in_a_user_folder(name, user_folder):
    _run_examples(name)
