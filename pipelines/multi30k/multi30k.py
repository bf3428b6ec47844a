# TFDS builder for Multi30k task 1 (Elliott et al. 2016), the corpus the CPU configs train on.
# Online it downloads the official raw files of the public multi30k/dataset repository
# (data/task1/raw/*.gz); offline it reads a local copy given as the manual_dir.
"""Multi30k task 1, en-de: 29,000 train / 1,014 validation / 1,000 test (test_2016_flickr) pairs.

Example::

    builder = Multi30k(data_dir="/tmp/tfds")
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
        manual_dir="/work/shared/data/multi30k"))          # offline: local copy
    next(iter(builder.as_dataset(split="train")))["en"]   # b"Two young, White males are ..."

From the command line (needs the ``[beam]`` extra, ``pip install -e ".[beam]"``: TFDS's
``tfds`` command imports ``apache_beam``, and ``mlcroissant`` for its croissant subcommand)::

    tfds build pipelines/multi30k --manual_dir=../shared/data/multi30k --data_dir=/tmp/tfds

With a manual dir nothing is downloaded. The builder generates its examples in one Python
process, not through Beam: TFDS builds through Beam only when ``_generate_examples`` returns a
Beam ``PTransform``, and then every build needs ``--beam_pipeline_options=runner=...`` (TFDS's
default, the DirectRunner, tries Prism, which downloads a binary at run time and fails offline).
For 31,014 short pairs that cost buys nothing: the build takes seconds. Corpora big enough to
need a cluster go through ``keras-transformer prepare --runner beam`` (``pipelines.beam``).
"""

from __future__ import annotations

import tensorflow_datasets as tfds
from etils import epath

from keras_transformer.data.corpus import MULTI30K_SPLITS
from keras_transformer.text.lines import DataError, iter_lines

_BASE_URL = "https://github.com/multi30k/dataset/raw/master/data/task1/raw/"
#: TFDS split -> file stem in the Multi30k repository (and in a local copy).
SPLIT_FILES = MULTI30K_SPLITS
LANGUAGES = ("en", "de")

_CITATION = """\
@inproceedings{elliott-etal-2016-multi30k,
  title = {Multi30K: Multilingual English-German Image Descriptions},
  author = {Elliott, Desmond and Frank, Stella and Sima'an, Khalil and Specia, Lucia},
  booktitle = {Proceedings of the 5th Workshop on Vision and Language},
  year = {2016},
  pages = {70--74},
}"""


class Multi30kConfig(tfds.core.BuilderConfig):
    """A language pair of Multi30k task 1 (only en-de has all three splits)."""

    def __init__(self, *, languages=LANGUAGES, **kwargs):
        super().__init__(**kwargs)
        self.languages = tuple(languages)


class Multi30k(tfds.core.GeneratorBasedBuilder):
    """Multi30k task 1 image-caption translations (English-German), raw and cased."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Task 1 raw files: train, val, test_2016_flickr."}
    BUILDER_CONFIGS = [
        Multi30kConfig(name="en-de", description="English-German, task 1 (translation).")
    ]
    MANUAL_DOWNLOAD_INSTRUCTIONS = """\
    Offline: put the task 1 raw files in the manual dir (plain or .gz):
    train.en train.de val.en val.de test_2016_flickr.en test_2016_flickr.de
    from https://github.com/multi30k/dataset/tree/master/data/task1/raw
    Online, leave the manual dir empty: the builder downloads them."""

    @tfds.core.utils.classproperty
    @classmethod
    def code_path(cls) -> epath.Path:
        # TFDS's default code_path reaches `importlib_resources.abc`, a package tensorflow-datasets
        # 4.9 uses but only declares for Python < 3.9 ("No module named 'importlib_resources'").
        # This file's path is what the default would compute.
        return epath.Path(__file__)

    def _info(self) -> tfds.core.DatasetInfo:
        return self.dataset_info_from_configs(
            description="Multi30k task 1: English image descriptions of Flickr30k images with "
            "professional German translations (WMT16 multimodal translation task).",
            features=tfds.features.FeaturesDict(
                {lang: tfds.features.Text() for lang in self.builder_config.languages}
            ),
            supervised_keys=self.builder_config.languages,
            homepage="https://github.com/multi30k/dataset",
            citation=_CITATION,
            # Keep the files' order: test hypotheses must line up with the reference files.
            disable_shuffling=True,
        )

    def _local_files(self, dl_manager):
        """{split: {lang: path}} from the manual dir, or None when there is no complete copy."""
        try:
            manual_dir = dl_manager.manual_dir
        except (AssertionError, ValueError):
            return None
        files = {}
        for split, stem in SPLIT_FILES.items():
            files[split] = {}
            for lang in self.builder_config.languages:
                for name in (f"{stem}.{lang}", f"{stem}.{lang}.gz"):
                    if (manual_dir / name).exists():
                        files[split][lang] = manual_dir / name
                        break
                else:
                    raise FileNotFoundError(
                        f"manual dir {manual_dir} lacks {stem}.{lang} (or .gz); "
                        f"{self.MANUAL_DOWNLOAD_INSTRUCTIONS}"
                    )
        return files

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        files = self._local_files(dl_manager)
        if files is None:
            urls = {
                split: {
                    lang: f"{_BASE_URL}{stem}.{lang}.gz" for lang in self.builder_config.languages
                }
                for split, stem in SPLIT_FILES.items()
            }
            files = dl_manager.download_and_extract(urls)
        return {split: self._generate_examples(paths) for split, paths in files.items()}

    def _generate_examples(self, paths):
        languages = list(paths)
        readers = [iter_lines(paths[lang]) for lang in languages]
        try:
            for index, lines in enumerate(zip(*readers, strict=True)):
                yield index, dict(zip(languages, lines, strict=True))
        except DataError:  # not UTF-8: the message names the file and line
            raise
        except ValueError as err:  # zip(strict=True): the files differ in length
            raise ValueError(f"Multi30k files differ in line count: {paths}: {err}") from err
        finally:
            for reader in readers:
                reader.close()
