# Input pipelines across machines: the batches of data.make_dataset produced by tf.data service
# workers instead of the training process (the paper's section 5.1 batching, unchanged).
"""The tf.data service: training batches made by worker machines, a dispatcher coordinating them.

One dispatcher, any number of workers (``keras-transformer data-service dispatcher|worker``, or
``start_dispatcher`` / ``start_worker`` here), and the training process, which sends its input
pipeline's graph to the dispatcher with ``distribute`` and reads the batches the workers make.
Workers run the whole pipeline (reading shards, batching by length), so they must see the same
files at the same paths (a shared file system or a bucket) and have this package installed (its
SentencePiece ops when the pipeline tokenizes text).

Processing mode: ``"distributed_epoch"`` (``PROCESSING_MODE``). The dispatcher hands each
worker a different part of the input (one shard file at a time), so each pair is read once per
epoch whatever the number of workers. With ``"parallel_epochs"`` every worker would run the whole
pipeline with the same shuffle seed, and training would see each batch once per worker.

Example::

    dispatcher = start_dispatcher(port=5050)
    workers = [start_worker(dispatcher.target, port=0) for _ in range(2)]
    train = distribute(make_dataset(...), dispatcher.target, job_name="train")
"""

from __future__ import annotations

import tensorflow as tf

__all__ = [
    "PROCESSING_MODE",
    "service_address",
    "distribute",
    "start_dispatcher",
    "start_worker",
]

#: How the dispatcher splits the work: each element once per epoch across all workers.
PROCESSING_MODE = "distributed_epoch"


def service_address(address: str) -> str:
    """``grpc://HOST:PORT`` from ``grpc://HOST:PORT`` or ``HOST:PORT``; ValueError otherwise."""
    text = (address or "").strip()
    bare = text.removeprefix("grpc://")
    host, _, port = bare.rpartition(":")
    if "://" in bare or not host or not port.isdigit():
        raise ValueError(
            f"data.service={address!r}: expected a dispatcher address grpc://HOST:PORT "
            "(keras-transformer data-service dispatcher --port PORT)"
        )
    return f"grpc://{bare}"


def distribute(
    dataset: tf.data.Dataset,
    address: str,
    job_name: str | None = None,
    processing_mode: str = PROCESSING_MODE,
) -> tf.data.Dataset:
    """``dataset``'s elements, made by the tf.data service workers of the dispatcher ``address``.

    ``job_name``: consumers with the same name share one job (each element goes to one of them);
    without it every call starts a job of its own.

    Example::

        train = distribute(train, "grpc://10.0.0.2:5050", job_name="wmt14-big")
    """
    return dataset.apply(
        tf.data.experimental.service.distribute(
            processing_mode=processing_mode,
            service=service_address(address),
            job_name=job_name,
        )
    )


def start_dispatcher(port: int = 0, work_dir: str | None = None):
    """Start a dispatcher on ``port`` (0: a free one); its address is ``server.target``.

    ``work_dir`` (a folder or bucket) keeps its journal, so a restarted dispatcher resumes its
    jobs (fault-tolerant mode); without it a restart forgets them.
    """
    config = tf.data.experimental.service.DispatcherConfig(
        port=port, work_dir=work_dir, fault_tolerant_mode=work_dir is not None
    )
    return tf.data.experimental.service.DispatchServer(config)


def start_worker(dispatcher: str, port: int = 0, worker_address: str | None = None):
    """Start a worker that registers with the ``dispatcher`` (``grpc://HOST:PORT``).

    ``worker_address`` is how the dispatcher and the trainers reach it (``HOST:PORT``; default
    ``localhost:PORT``): give the machine's name when they run elsewhere.
    """
    import keras_transformer.text.tokenizer  # noqa: F401  (registers the SentencePiece ops)

    dispatcher_address = service_address(dispatcher).removeprefix("grpc://")
    config = tf.data.experimental.service.WorkerConfig(
        dispatcher_address=dispatcher_address,
        port=port,
        **({"worker_address": worker_address} if worker_address else {}),
    )
    return tf.data.experimental.service.WorkerServer(config)
