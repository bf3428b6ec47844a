# Paper section 5.2 (Hardware and Schedule): data-parallel training over several accelerators.
"""Choosing a ``tf.distribute`` strategy, and the Keras 3 fix that multi-worker ``fit`` needs.

Example:

>>> strategy = get_strategy("default")
>>> strategy.num_replicas_in_sync
1

Typical use (``TF_CONFIG`` set on every worker selects ``MultiWorkerMirroredStrategy``)::

    strategy = get_strategy()            # applies apply_multi_worker_fix() when multi-worker
    with strategy.scope():
        model = build_transformer(config)
        model.compile(optimizer=transformer_optimizer(config.d_model),
                      loss=LabelSmoothedCrossEntropy())
    model.fit(dataset, ...)

Keras 3 bug (keras-team/keras#20585, tensorflow/tensorflow#72388; still present in Keras 3.15.1):
``model.fit`` under ``MultiWorkerMirroredStrategy`` fails in two places of
``keras/src/backend/tensorflow/trainer.py``, only when collective all-reduce spans workers:

1. ``TensorFlowTrainer._maybe_symbolic_build`` calls ``strategy.reduce("MEAN", batch)`` eagerly on
   the first distributed batch, only to get shapes ("Attempt to convert a value (PerReplica...) to
   a Tensor"). The fix takes the first local replica's batch instead: same shapes, no collective.
2. ``reduce_per_replica`` reduces every metric value with ``strategy.reduce("MEAN", v, axis=0)``,
   which fails for scalars ("Invalid reduction dimension 0 for input with 0 dimensions"). The fix
   reduces scalars with ``axis=None`` (the mean over replicas) and keeps ``axis=0`` otherwise.

Both replacements delegate to the original Keras code for every other strategy, so
:func:`apply_multi_worker_fix` changes nothing for single-worker training. Remove this fix once
Keras ships its own; ``tests/test_distribute.py`` fails when the patched Keras code changes.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import os

import tensorflow as tf

__all__ = [
    "get_strategy",
    "apply_multi_worker_fix",
    "multi_worker_fix_applied",
    "remove_multi_worker_fix",
]

_KINDS = ("auto", "mirrored", "multi_worker", "default")
_TRAINER_MODULE = "keras.src.backend.tensorflow.trainer"
_MARK = "_keras_transformer_multi_worker_fix"
# Keras internals the fix relies on: name -> expected parameters.
_EXPECTED = {
    "TensorFlowTrainer._maybe_symbolic_build": ["self", "iterator", "data_batch"],
    "reduce_per_replica": ["values", "strategy", "reduction"],
    "_collective_all_reduce_multi_worker": ["strategy"],
}


def _has_cluster(tf_config: str | None) -> bool:
    if not tf_config:
        return False
    try:
        cluster = json.loads(tf_config).get("cluster", {})
    except (ValueError, AttributeError) as error:
        raise ValueError(f"TF_CONFIG is not a JSON object: {tf_config!r}") from error
    return bool(cluster)


def get_strategy(kind: str = "auto", devices=None) -> tf.distribute.Strategy:
    """Returns a ``tf.distribute`` strategy.

    Args:
        kind: ``"auto"``: ``MultiWorkerMirroredStrategy`` when ``TF_CONFIG`` names a cluster, else
            ``"mirrored"``. ``"mirrored"``: ``MirroredStrategy`` over ``devices`` (default: every
            local GPU, or the one CPU where there is none). ``"multi_worker"``:
            ``MultiWorkerMirroredStrategy`` (cluster from ``TF_CONFIG``; one local worker without
            it). ``"default"``: TensorFlow's no-op default strategy.
        devices: device names for ``"mirrored"`` (e.g. ``["/cpu:0", "/cpu:1"]``); not allowed
            with the other kinds.

    The multi-worker strategy is returned with :func:`apply_multi_worker_fix` applied. Call this
    before any other TensorFlow op: a multi-worker strategy must be created first.
    """
    if kind not in _KINDS:
        raise ValueError(f"get_strategy: kind must be one of {_KINDS}, got {kind!r}")
    if kind == "auto":
        kind = "multi_worker" if _has_cluster(os.environ.get("TF_CONFIG")) else "mirrored"
    if devices is not None and kind != "mirrored":
        raise ValueError(f"get_strategy: devices are only for kind='mirrored', not {kind!r}")
    if kind == "default":
        return tf.distribute.get_strategy()
    if kind == "multi_worker":
        apply_multi_worker_fix()
        return tf.distribute.MultiWorkerMirroredStrategy()
    if devices is None:
        gpus = tf.config.list_logical_devices("GPU")
        devices = [gpu.name for gpu in gpus] or ["/cpu:0"]
    return tf.distribute.MirroredStrategy(devices=list(devices))


# ----------------------------------------------------------------------------- Keras 3 fix
def _keras_internals():
    """The trainer module and the three internals the fix needs; a clear error if Keras changed."""
    import keras

    if keras.backend.backend() != "tensorflow":
        raise RuntimeError(
            "apply_multi_worker_fix: needs the TensorFlow backend of Keras, "
            f"not {keras.backend.backend()!r}"
        )
    try:
        module = importlib.import_module(_TRAINER_MODULE)
    except ImportError as error:
        raise RuntimeError(
            f"apply_multi_worker_fix: Keras {keras.__version__} has no "
            f"{_TRAINER_MODULE}; re-check keras-team/keras#20585"
        ) from error
    found = {}
    for dotted, parameters in _EXPECTED.items():
        owner = module
        *parents, name = dotted.split(".")
        for parent in parents:
            owner = getattr(owner, parent, None)
        function = getattr(owner, name, None) if owner is not None else None
        if function is None or not callable(function):
            raise RuntimeError(
                f"apply_multi_worker_fix: Keras {keras.__version__} has no "
                f"{_TRAINER_MODULE}.{dotted}; the upstream code changed, re-check "
                "keras-team/keras#20585 and update keras_transformer/distribute.py"
            )
        original = (
            getattr(function, "__wrapped__", function)
            if getattr(function, _MARK, False)
            else function
        )
        actual = list(inspect.signature(original).parameters)
        if actual != parameters:
            raise RuntimeError(
                f"apply_multi_worker_fix: {_TRAINER_MODULE}.{dotted} now takes "
                f"{actual}, expected {parameters}; the upstream code changed, "
                "re-check keras-team/keras#20585"
            )
        found[dotted] = function
    return module, found


def multi_worker_fix_applied() -> bool:
    """Whether :func:`apply_multi_worker_fix` is in effect."""
    _, found = _keras_internals()
    return all(
        getattr(found[name], _MARK, False)
        for name in ("TensorFlowTrainer._maybe_symbolic_build", "reduce_per_replica")
    )


def apply_multi_worker_fix() -> bool:
    """Patches Keras so that ``model.fit`` works under multi-worker ``MultiWorkerMirroredStrategy``.

    Idempotent; returns ``True`` if it patched now, ``False`` if the fix was already in place.
    Raises ``RuntimeError`` if the Keras internals it replaces are gone or changed signature.
    See the module docstring for the two upstream bugs (keras-team/keras#20585,
    tensorflow/tensorflow#72388).

    Example:

    >>> apply_multi_worker_fix() in (True, False)
    True
    >>> multi_worker_fix_applied()
    True
    """
    import keras

    module, found = _keras_internals()
    if multi_worker_fix_applied():
        return False
    is_multi_worker = found["_collective_all_reduce_multi_worker"]
    trainer_class = module.TensorFlowTrainer
    original_build = found["TensorFlowTrainer._maybe_symbolic_build"]
    original_reduce = found["reduce_per_replica"]

    @functools.wraps(original_build)
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        strategy = self._distribute_strategy
        if iterator is not None and strategy is not None and is_multi_worker(strategy):
            # Upstream reduces the batch across workers eagerly; only its shapes are needed.
            for _, _, distributed_iterator in iterator:
                batch = next(distributed_iterator)
                data_batch = keras.tree.map_structure(
                    lambda value: (
                        strategy.experimental_local_results(value)[0]
                        if isinstance(value, tf.distribute.DistributedValues)
                        else value
                    ),
                    batch,
                )
                break
            iterator = None
        return original_build(self, iterator=iterator, data_batch=data_batch)

    @functools.wraps(original_reduce)
    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("auto", "mean") and is_multi_worker(strategy):
            # Upstream reduces with axis=0, which fails for the scalar metric values.
            def mean(value):
                distributed = isinstance(value, tf.distribute.DistributedValues)
                local = strategy.experimental_local_results(value)[0] if distributed else value
                axis = 0 if getattr(local, "shape", None) is not None and local.shape.rank else None
                try:
                    return strategy.reduce("MEAN", value, axis=axis)
                except ValueError:
                    if distributed:
                        raise
                    # A graph tensor with no device (a value Keras computed outside the
                    # replicas, e.g. in `keras-transformer train`'s logs): one value already.
                    return value

            return keras.tree.map_structure(mean, values)
        return original_reduce(values, strategy, reduction)

    setattr(_maybe_symbolic_build, _MARK, True)
    setattr(reduce_per_replica, _MARK, True)
    trainer_class._maybe_symbolic_build = _maybe_symbolic_build
    module.reduce_per_replica = reduce_per_replica
    return True


def remove_multi_worker_fix() -> bool:
    """Restores the original Keras functions; returns whether anything was patched."""
    module, found = _keras_internals()
    removed = False
    build = found["TensorFlowTrainer._maybe_symbolic_build"]
    if getattr(build, _MARK, False):
        module.TensorFlowTrainer._maybe_symbolic_build = build.__wrapped__
        removed = True
    reduce = found["reduce_per_replica"]
    if getattr(reduce, _MARK, False):
        module.reduce_per_replica = reduce.__wrapped__
        removed = True
    return removed
