"""Shared pytest fixtures: the real corpora and a quiet, deterministic TensorFlow."""

import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# The README's command runs two test processes on a 2-core machine, and many tests start fresh
# processes of their own beside them: with TensorFlow's default of one intra-op thread per core
# their thread pools compete (two files took 0.70x and 0.93x the time with one thread in two A/B
# passes: results/test_suite.md). Fresh processes inherit this through the environment.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
# Nothing downloads in the tests: every proxy variable points at a closed port of this machine
# (the discard port), so a download by the test run or by any fresh process it starts (they
# inherit the environment) fails at once, here as on a machine without a network. The local
# servers the tests start (tf.data service, Beam's runner, a MultiWorker cluster) are exempt.
CLOSED_PROXY = "http://127.0.0.1:9"
for _variable in ("http_proxy", "https_proxy", "all_proxy", "ftp_proxy"):
    os.environ[_variable] = os.environ[_variable.upper()] = CLOSED_PROXY
os.environ["no_proxy"] = os.environ["NO_PROXY"] = "localhost,127.0.0.1,::1"

import pytest  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]

# The shared test tokenizer's size. The tests train tiny models (d_model 32), whose step time the
# vocabulary dominates: the output projection and the softmax over it (8,000 pieces against
# 1,000: results/test_suite.md, session 15).
TEST_VOCAB_SIZE = 1000


@pytest.fixture(scope="session")
def data_dir() -> pathlib.Path:
    """Folder of the real corpora, found as the library finds it (``KT_DATA_DIR``, default
    ``../shared/data`` beside the checkout: ``training.run_config.data_dir``); read-only in CI."""
    from keras_transformer.training.run_config import data_dir as corpora

    path = corpora()
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
    """A ``SubwordTokenizer`` (BPE, vocab ``TEST_VOCAB_SIZE``) trained once per session on
    Multi30k train en+de.

    Trains in about a second; its ``.model`` file is under a session temp folder
    (``tokenizer.model_path``). Save it with ``tokenizer.save(tmp_path / "tok")`` where needed.
    """
    from keras_transformer.text.tokenizer import SubwordTokenizer

    output = tmp_path_factory.mktemp("multi30k_tokenizer")
    return SubwordTokenizer.train(
        [multi30k_dir / "train.en", multi30k_dir / "train.de"],
        vocab_size=TEST_VOCAB_SIZE,
        output_dir=output,
    )


# A toy corpus made here (no corpora needed): sentences over a small vocabulary, for the fast
# tier's tokenizer and export tests.
TOY_WORDS = (
    "a dog cat man woman child runs walks sits on the in red blue green street park ball water "
    "with two three playing is are big small"
).split()


def toy_sentences(count: int, seed: int = 0) -> list[str]:
    import random

    rng = random.Random(seed)
    return [
        " ".join(rng.choice(TOY_WORDS) for _ in range(rng.randint(3, 12))).capitalize() + "."
        for _ in range(count)
    ]


@pytest.fixture(scope="session")
def toy_tokenizer():
    """A ``SubwordTokenizer`` of 400 pieces (256 of them bytes) trained in memory on 2,000 toy
    sentences: seconds, no corpora."""
    from keras_transformer.text.tokenizer import SubwordTokenizer

    return SubwordTokenizer.train(toy_sentences(2000), vocab_size=400)


def fresh_process_environment(env=None) -> dict:
    """The user's environment for a fresh process: this checkout first on PYTHONPATH, without a
    TF_CPP_MIN_LOG_LEVEL of the test run's own, plus ``env``."""
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO_ROOT), environment.get("PYTHONPATH")])
    )
    environment.update(env or {})
    return environment


def _run_cli(*args, cwd, timeout=300, env=None):
    """``python -m keras_transformer.cli ARGS`` in a fresh process (the user's environment,
    without a TF_CPP_MIN_LOG_LEVEL of the test run's own)."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "keras_transformer.cli", *map(str, args)],
        cwd=cwd,
        env=fresh_process_environment(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def run_cli():
    return _run_cli


@pytest.fixture(scope="session")
def prepared(tmp_path_factory, multi30k_dir, run_cli):
    """Multi30k train (first 2,000 pairs) and val prepared into 2 shards each by the CLI."""
    folder = tmp_path_factory.mktemp("prepared")
    small = folder / "text"
    small.mkdir()
    for name, lines in (("train", 2000), ("val", 200)):
        for lang in ("en", "de"):
            text = (multi30k_dir / f"{name}.{lang}").read_text(encoding="utf-8").splitlines()
            (small / f"{name}.{lang}").write_text("\n".join(text[:lines]) + "\n", encoding="utf-8")
    args = ["--source", small / "train.en", "--target", small / "train.de", "--split", "train"]
    args += ["--source", small / "val.en", "--target", small / "val.de", "--split", "validation"]
    result = run_cli(
        "prepare",
        *args,
        "--output",
        folder / "shards",
        "--vocab-size",
        600,
        "--num-shards",
        2,
        "--max-sentence-length",
        64,
        cwd=folder,
    )
    assert result.returncode == 0, result.stderr
    return folder


def small_multi30k(multi30k_dir, folder, tokenizer, train_lines, val_lines) -> dict:
    """The first lines of Multi30k train and val in ``folder``, ``tokenizer`` saved beside them;
    returns the ``data`` section of a training config that reads them."""
    folder = pathlib.Path(folder)
    for name, lines in (("train", train_lines), ("val", val_lines)):
        for lang in ("en", "de"):
            text = (multi30k_dir / f"{name}.{lang}").read_text(encoding="utf-8").splitlines()
            (folder / f"{name}.{lang}").write_text("\n".join(text[:lines]) + "\n", "utf-8")
    tokenizer.save(folder / "tokenizer")
    return {
        "train_source": str(folder / "train.en"),
        "train_target": str(folder / "train.de"),
        "validation_source": str(folder / "val.en"),
        "validation_target": str(folder / "val.de"),
        "tokenizer": str(folder / "tokenizer"),
    }


def searchers_of(model, **fixed):
    """``get(**settings)``: one ``Searcher`` of ``model`` per search settings (``fixed`` under
    each; equal settings, however spelled, share it), so that a search traced once serves every
    test of a module that asks for it. Use it in a module-scoped fixture."""
    from keras_transformer.inference.search import Searcher
    from keras_transformer.inference.settings import SearchSettings

    built = {}

    def get(**changes):
        settings = SearchSettings().replace(**{**fixed, **changes})
        if settings not in built:
            built[settings] = Searcher(model, settings)
        return built[settings]

    return get


# The files that take longest, first: `pytest -n 2 --dist loadfile` (the README's command) hands
# files to its two processes in collection order, so a long file collected last would run alone
# at the end while the other process idles. Order: each file's total seconds in a full run
# (`--durations=0`, 2026-12-07, results/test_suite.md), longest first; files under a minute
# follow in collection order.
LONG_FILES = (
    "test_ctranslate2.py",
    "test_serving.py",
    "test_resume.py",
    "test_training_settings.py",
    "test_training.py",
    "test_ensemble.py",
    "test_export.py",
    "test_commands.py",
    "test_workers.py",
    "test_decoding.py",
    "test_beam.py",
    "test_repetition_guard.py",
    "test_wmt14_recipe.py",
    "test_docstrings.py",
    "test_data_mix.py",
    "test_notebooks.py",
    "test_ablation.py",
    "test_train_from_shards.py",
    "test_sampling.py",
    "test_beam_kill.py",
    "test_quickstart.py",
    "test_restricted_attention.py",
    "test_segments.py",
    "test_data_service.py",
    "test_pipelines.py",
    "test_distribute.py",
)


def pytest_configure(config):
    # pytest-xdist otherwise reorders the files by their number of tests, most first, which
    # puts the many quick parametrized tests first and the few long ones last.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


# The fixtures that read the corpora: a test that uses one (directly or through another fixture)
# is in the slow tier, as is every test marked ``slow`` by hand (those that train or start
# servers). ``python -m pytest tests -m "not slow"`` runs the rest: no corpora, minutes.
CORPUS_FIXTURES = {"data_dir", "multi30k_dir", "multi30k_tokenizer", "prepared"}


# The README installs every extra (Beam, CTranslate2, the notebooks' kernel), so no test has a
# reason to skip: a skip would hide a test in CI, as the CTranslate2 half of the command test
# once did. Each skip is reported as a failure, with its reason.
SKIP_IS_FAILURE = "a skipped test is a failure here (the README installs every extra)"


def _fail_a_skip(report):
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome, report.longrepr = "failed", f"{SKIP_IS_FAILURE}: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_a_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_a_skip(outcome.get_result())


def pytest_collection_modifyitems(config, items):
    for item in items:
        if CORPUS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    rank = {name: position for position, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FILES)))  # stable sort
