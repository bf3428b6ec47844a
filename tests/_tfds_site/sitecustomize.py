"""TensorFlow Datasets mocked in a fresh process: put this folder on the child's PYTHONPATH.

Python imports ``sitecustomize`` at start-up (``site``), before the command runs. Only when the
environment names ``KT_TEST_TFDS_MOCK`` (a JSON file) does this module do anything, and then
only as ``tensorflow_datasets`` is first imported: TensorFlow is not imported any earlier than
the command imports it, and a process that never imports TFDS is untouched.

The mock is TFDS's own ``tfds.testing.mock_data`` (``MockPolicy.USE_CODE``: the builder class,
its configs and features as the installed TFDS defines them; the data folder moved to one that
does not exist, so nothing prepared on this machine is read; GCS unreachable), entered for the
life of the process. Over two of its patches: ``DatasetBuilder.download_and_prepare`` (a no-op
that is logged) and ``DatasetBuilder.as_dataset``, which serves line-aligned text files instead
of random strings (mock_data's own reads under a mocked file system that is global to the process
and not thread-safe, and prepare reads splits from several threads)::

    {"datasets": {"wmt14_translate/de-en": {"test": {"en": "newstest2014.en",
                                                     "de": "newstest2014.de"}, ...}},
     "log": "tfds_calls.jsonl"}

A split or dataset the file does not name raises. Each ``download_and_prepare`` and each split
read is appended to ``log`` as a JSON line, so the test can see what the command asked of TFDS.
"""

import importlib.abc
import importlib.util
import json
import os
import sys

_CONFIG = os.environ.get("KT_TEST_TFDS_MOCK")
_MOCKS = []


def _log(config, **event):
    with open(config["log"], "a", encoding="utf-8") as log:
        log.write(json.dumps(event) + "\n")


def _lines(path):
    with open(path, encoding="utf-8") as file:
        return file.read().splitlines()


def _install(config):
    from unittest import mock

    import tensorflow as tf
    from tensorflow_datasets.core import dataset_builder
    from tensorflow_datasets.testing import mocking

    def name_of(builder):
        config_name = builder.builder_config.name if builder.builder_config else None
        return f"{builder.name}/{config_name}" if config_name else builder.name

    def as_dataset(builder, split=None, **kwargs):
        name, split = name_of(builder), str(split)
        files = config["datasets"].get(name, {}).get(split)
        if files is None:
            raise ValueError(f"TFDS mock: no data for {name} split {split!r}")
        columns = {lang: _lines(path) for lang, path in files.items()}
        if set(columns) != set(builder.info.features.keys()):
            raise ValueError(f"TFDS mock: {name} has features {sorted(builder.info.features)}")
        _log(config, call="as_dataset", dataset=name, split=split, **kwargs)
        return tf.data.Dataset.from_tensor_slices(columns)

    def download_and_prepare(builder, *args, **kwargs):
        _log(config, call="download_and_prepare", dataset=name_of(builder))

    # Kept for the life of the process (a context manager that is collected exits).
    _MOCKS.append(mocking.mock_data(policy=mocking.MockPolicy.USE_CODE))
    _MOCKS[-1].__enter__()
    # After mock_data, over two of its patches: its as_dataset runs TFDS's reader under a mocked
    # file system that is global to the process and not thread-safe (prepare reads splits from
    # several threads: "Temp directory uninitialized"); here a split is the files' lines.
    for name, function in (
        ("as_dataset", as_dataset),
        ("download_and_prepare", download_and_prepare),
    ):
        mock.patch.object(dataset_builder.DatasetBuilder, name, function).start()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Installs the mock once ``tensorflow_datasets`` has been executed."""

    def __init__(self, config):
        self.config = config

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow_datasets":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None:  # not installed: the import fails as it would
            return None
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            _install(self.config)

        spec.loader.exec_module = exec_module
        return spec


if _CONFIG:
    with open(_CONFIG, encoding="utf-8") as _file:
        sys.meta_path.insert(0, _AfterImport(json.load(_file)))
