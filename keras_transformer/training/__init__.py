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

Example:

>>> config = TrainingConfig.load("configs/quickstart.yaml", ["training.max_steps=2"])
>>> config.model.preset, config.model.d_model, config.data.max_sentence_length
('small', 128, 100)
>>> config.model_config(vocab_size=8000).d_model
128
"""

from keras_transformer.config import ModelSettings
from keras_transformer.training.averaging import (
    AVERAGE_CHOICE_FILE,
    AVERAGED_FILE,
    average_checkpoints,
    choose_average,
)
from keras_transformer.training.callbacks import (
    BleuCallback,
    KeepLastCheckpoints,
    TimeBudget,
    TokensPerSecond,
    checkpoint_step,
    list_checkpoints,
)
from keras_transformer.training.curves import bleu_curve, checkpoint_at_minutes, history
from keras_transformer.training.loop import (
    check_same_run,
    compile_model,
    load_run_model,
    prepare_tokenizer,
    train,
)
from keras_transformer.training.run_config import (
    DataSettings,
    SearchSettings,
    TrainingConfig,
    TrainingSettings,
    apply_overrides,
    data_path,
)
from keras_transformer.training.run_dir import (
    CHECKPOINT_DIR,
    CHECKPOINT_PATTERN,
    FINISHED_FILE,
    HISTORY_FILE,
    MODEL_FILE,
    RUN_CONFIG,
    TOKENIZER_DIR,
    NotARunDirectoryError,
    check_run_dir,
)

__all__ = [
    "AVERAGED_FILE",
    "AVERAGE_CHOICE_FILE",
    "BleuCallback",
    "CHECKPOINT_DIR",
    "CHECKPOINT_PATTERN",
    "DataSettings",
    "FINISHED_FILE",
    "HISTORY_FILE",
    "KeepLastCheckpoints",
    "MODEL_FILE",
    "ModelSettings",
    "NotARunDirectoryError",
    "RUN_CONFIG",
    "TOKENIZER_DIR",
    "TimeBudget",
    "TokensPerSecond",
    "SearchSettings",
    "TrainingConfig",
    "TrainingSettings",
    "apply_overrides",
    "average_checkpoints",
    "bleu_curve",
    "check_run_dir",
    "check_same_run",
    "checkpoint_at_minutes",
    "checkpoint_step",
    "choose_average",
    "compile_model",
    "data_path",
    "history",
    "list_checkpoints",
    "load_run_model",
    "prepare_tokenizer",
    "train",
]
