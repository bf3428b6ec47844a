# Paper section 5.2 (data-parallel training on several devices), across machines.
"""Training across machines: ``TF_CONFIG=... keras-transformer train`` on every worker.

* **Strategy first.** ``train`` creates the strategy before anything else touches TensorFlow
  (``MultiWorkerMirroredStrategy`` must configure its collectives at program start-up).
* **Run directories.** The chief (task ``chief``, or ``worker`` 0 when the cluster has no chief)
  owns ``--run DIR``: its ``model.keras``, checkpoints, history and logs are the run's. Every
  other worker writes the same files under ``DIR/workers/<type>_<index>`` (Keras' multi-worker
  convention: non-chief workers write apart, so that nothing is written twice; on separate
  machines that folder is local to the worker). Each keeps its own backups there
  (``training/backup.py``); restarted after a kill, the workers agree on the newest backup every
  one of them holds (``agree_on_backup``) and resume from it together.
* **One tokenizer.** Every worker must read the same one, prepared beforehand: ``data.shards``
  (the shards' own tokenizer) or ``data.tokenizer``; a multi-worker run without either is refused
  rather than training one tokenizer per worker.
* **Input.** The datasets use the ``DATA`` auto-shard policy: every worker reads the same stream
  (shards or text) with the same seed, and each replica takes its slice of every global batch, so
  ``data.tokens_per_batch`` is the budget of the *global* batch and N workers compute the steps
  one process would on the same batches (``tests/test_workers.py``).
* **Time budget.** ``training.max_minutes`` is refused with several workers: each would decide
  alone when to stop, and a worker that stops leaves the others waiting in a collective. Use
  ``training.max_steps``.
"""

from __future__ import annotations

import json
import os
import pathlib

WORKERS_DIR = "workers"


class WorkerSettingsError(ValueError):
    """Settings that cannot work on several workers; the message names them."""


def cluster_size(tf_config: str | None = None) -> int:
    """Chief and workers named by ``TF_CONFIG`` (1 without a cluster); reads no TensorFlow."""
    tf_config = os.environ.get("TF_CONFIG") if tf_config is None else tf_config
    if not tf_config:
        return 1
    cluster = json.loads(tf_config).get("cluster", {})
    return max(1, sum(len(cluster.get(kind, [])) for kind in ("chief", "worker")))


def task(strategy) -> tuple[str, int]:
    """``(task_type, task_id)`` of this process; ``("worker", 0)`` outside a cluster."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return "worker", 0
    return resolver.task_type, int(resolver.task_id or 0)


def is_chief(strategy) -> bool:
    """The chief task, or worker 0 of a cluster that has no chief (Keras' convention)."""
    task_type, task_id = task(strategy)
    resolver = getattr(strategy, "cluster_resolver", None)
    has_chief = resolver is not None and "chief" in resolver.cluster_spec().as_dict()
    return task_type == "chief" or (task_type == "worker" and task_id == 0 and not has_chief)


def worker_run_dir(run_dir, strategy) -> pathlib.Path:
    """The folder this process writes to: ``run_dir`` on the chief, a sub-folder elsewhere."""
    run_dir = pathlib.Path(run_dir)
    if is_chief(strategy):
        return run_dir
    task_type, task_id = task(strategy)
    return run_dir / WORKERS_DIR / f"{task_type}_{task_id}"


def check_multi_worker_config(config) -> None:
    """Refuses settings that cannot work with several workers (see the module docstring);
    call it before creating the strategy, which starts this worker's server."""
    workers = cluster_size()
    if workers < 2:
        return
    if not (config.data.shards or config.data.tokenizer):
        raise WorkerSettingsError(
            f"a run on {workers} workers needs a tokenizer prepared beforehand, the same on every "
            "worker: set data.shards (keras-transformer prepare) or data.tokenizer"
        )
    if config.training.max_minutes:
        raise WorkerSettingsError(
            f"training.max_minutes={config.training.max_minutes} with {workers} workers: each "
            "worker would stop on its own clock; use training.max_steps"
        )


def shard_by_data(dataset):
    """``dataset`` with the ``DATA`` auto-shard policy (each replica a slice of every batch)."""
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def agree_on_backup(backup, strategy) -> dict | None:
    """Restores ``backup``'s newest state, or on several workers the newest one that every worker
    holds: a worker killed while the others backed up has one backup fewer. Workers exchange the
    batch counts of their backups with an all-gather; returns the restore point (or None)."""
    if strategy.num_replicas_in_sync < 2 or cluster_size() < 2:
        return backup.restore_point()
    import numpy as np
    import tensorflow as tf

    mine = ([-1] * backup.keep + backup.saved_batches())[-backup.keep :]  # the newest, padded

    def gather():
        local = tf.constant([mine], tf.int64)
        return tf.distribute.get_replica_context().all_gather(local, axis=0)

    gathered = strategy.experimental_local_results(tf.function(lambda: strategy.run(gather))())
    rows = [set(row) - {-1} for row in np.asarray(gathered[0])]
    common = set.intersection(*rows)
    return backup.restore_point(at=max(common)) if common else None
