# Offline preprocessing jobs: corpus -> shared tokenizer + tokenized TFRecord shards (prepare.py),
# and TFDS builders for corpora tensorflow-datasets does not ship (multi30k/).
"""Preprocessing jobs and TFDS builders for keras-transformer.

* ``python -m pipelines.prepare ...``: train or reuse the tokenizer, write TFRecord shards and a
  manifest (see :mod:`pipelines.prepare`; the job itself is :mod:`pipelines.job`, with
  :mod:`pipelines.inputs`, :mod:`pipelines.shards` and :mod:`pipelines.manifest`; with
  ``--runner beam``, :mod:`pipelines.beam`, and :mod:`pipelines.storage` / :mod:`pipelines.remote`
  for inputs and output on gs://, s3://, hdfs:// through Beam's ``FileSystems``).
* ``pipelines.multi30k.Multi30k``: a ``tfds`` builder for Multi30k task 1 (en-de).
"""
