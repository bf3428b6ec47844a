"""The pieces of ``benchmarks/training/train_throughput.py`` (run that module; its docstring
says what is measured), one job per module:

* ``settings``: the settings, systems and sizes compared, and where corpora and tokenizers live;
* ``tokenizers``: trains (or finds cached) SentencePiece and WordPiece tokenizers;
* ``ours``: our model and input pipeline (``build_transformer``, ``make_dataset``,
  ``compile_model``);
* ``baseline``: the keras.io "English-to-Spanish translation with KerasHub" recipe, model and
  pipeline;
* ``batches``: the batches a measurement uses, and one-epoch statistics of each pipeline;
* ``flops``: the FLOP model, per-batch counts and the summary of the timed steps;
* ``timing``: the matmul peak, the step timer and memory readings;
* ``profile``: the split of our step and the layer micro-benchmark (``--profile``);
* ``child``: what one subprocess does (``prepare`` or one ``measure``);
* ``report``: ratios, targets and the printed table;
* ``cli``: the command line and the parent that runs one subprocess per (setting, system).

TensorFlow, Keras, keras-hub and the library are imported inside the functions that need them:
the parent process never loads TensorFlow, and a child loads only what its system needs (peak RSS
is measured per child).
"""
