# Paper section 6.2 and Table 3: variations on the Transformer architecture.
"""Table 3 of the paper as one command: the ablation runner.

* ``rows.py``: the rows (A-E, R) as overrides of one base config, and plan files;
* ``settings.py``: a plan's settings and each row's run folder;
* ``runner.py``: each row a ``keras-transformer train`` process, resumable and killable;
* ``evaluate.py``: perplexity and greedy sacreBLEU on the whole validation set;
* ``table.py``: the table and the plot; ``ablate.py``: ``ablate`` and ``ablation_plan``.
"""

from keras_transformer.lazy import lazy_names

__all__, __getattr__, __dir__ = lazy_names(
    __name__, {"ablate": ("AblationInterrupted", "ablate", "ablation_plan")}
)
