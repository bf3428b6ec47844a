"""Shared pytest fixtures: the real corpora and a quiet, deterministic TensorFlow."""

import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import pytest  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]


def _data_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("KT_DATA_DIR", REPO_ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
    """Folder of the real corpora (``KT_DATA_DIR``, default ``../shared/data``); read-only in CI."""
    path = _data_dir()
    if not path.is_dir():
        pytest.fail(f"KT_DATA_DIR={path} does not exist: the tests need the real corpora")
    return path


@pytest.fixture(scope="session")
def multi30k_dir(data_dir) -> pathlib.Path:
    return data_dir / "multi30k"


@pytest.fixture(autouse=True)
def _seed():
    import keras

    keras.utils.set_random_seed(1234)
    yield


@pytest.fixture(scope="session")
def multi30k_tokenizer(multi30k_dir, tmp_path_factory):
    """A ``SubwordTokenizer`` (BPE, vocab 8000) trained once per session on Multi30k train en+de.

    Trains in about a second; its ``.model`` file is under a session temp folder
    (``tokenizer.model_path``). Save it with ``tokenizer.save(tmp_path / "tok")`` where needed.
    """
    from keras_transformer.tokenization import SubwordTokenizer

    output = tmp_path_factory.mktemp("multi30k_tokenizer")
    return SubwordTokenizer.train(
        [multi30k_dir / "train.en", multi30k_dir / "train.de"],
        vocab_size=8000,
        output_dir=output,
    )
