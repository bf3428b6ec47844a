"""Training with ``model.fit``: the paper's optimizer, schedule and loss (section 5), resumable
runs, checkpoints, TensorBoard, validation BLEU, and checkpoint averaging (section 6.1).

One job a module:

- ``run_config``: ``TrainingConfig`` (``model`` / ``data`` / ``training`` / ``search``
  sections), overrides, corpus paths under ``KT_DATA_DIR``.
- ``run_dir``: the names inside a run directory, and the check that a folder is one.
- ``callbacks``: tokens/s, last-N checkpoints, the wall-clock budget, validation BLEU.
- ``loop``: ``compile_model``, ``train`` and ``load_run_model``.
- ``averaging``: ``average_checkpoints`` and ``choose_average`` (on validation BLEU).
- ``curves``: BLEU of each checkpoint against training minutes.

The names below load on first use (``keras_transformer.lazy``): ``run_config`` and ``run_dir``
import no TensorFlow, so the command line checks a config and a run folder before it loads.

Example:

>>> from keras_transformer.training import TrainingConfig
>>> config = TrainingConfig.load("configs/quickstart.yaml", ["training.max_steps=2"])
>>> config.model.preset, config.model.d_model, config.data.max_sentence_length
('small', 128, 100)
>>> config.model_config(vocab_size=8000).d_model
128
"""

from keras_transformer.lazy import lazy_names

__all__, __getattr__, __dir__ = lazy_names(
    __name__,
    {
        "averaging": (
            "AVERAGE_CHOICE_FILE",
            "AVERAGED_FILE",
            "average_checkpoints",
            "choose_average",
        ),
        "callbacks": (
            "BleuCallback",
            "KeepLastCheckpoints",
            "TimeBudget",
            "TokensPerSecond",
        ),
        "curves": ("bleu_curve", "checkpoint_at_minutes", "history"),
        "loop": ("compile_model", "load_run_model", "prepare_tokenizer", "train"),
        "run_config": (
            "DataSettings",
            "ExportSettings",
            "ModelSettings",
            "SearchSettings",
            "TrainingConfig",
            "TrainingSettings",
            "apply_overrides",
            "data_path",
        ),
        "run_dir": (
            "CHECKPOINT_DIR",
            "CHECKPOINT_PATTERN",
            "FINISHED_FILE",
            "HISTORY_FILE",
            "MODEL_FILE",
            "RUN_CONFIG",
            "TOKENIZER_DIR",
            "NotARunDirectoryError",
            "check_run_dir",
            "check_same_run",
            "checkpoint_step",
            "list_checkpoints",
        ),
    },
)
