# TFDS builder for Multi30k task 1 (the WMT16 multimodal translation captions), English-German.
"""Multi30k as a tensorflow-datasets builder.

Example::

    import tensorflow_datasets as tfds
    from pipelines.multi30k import Multi30k   # registers "multi30k"

    builder = Multi30k(data_dir="~/tensorflow_datasets")
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir="../shared/data/multi30k"))
    train = builder.as_dataset(split="train")   # {"en": tf.string, "de": tf.string}

or ``tfds build pipelines/multi30k --manual_dir=../shared/data/multi30k`` (needs the ``[beam]``
extra; see ``pipelines.multi30k.multi30k``).
"""

from pipelines.multi30k.multi30k import Multi30k

__all__ = ["Multi30k"]
