"""``keras-transformer data-service dispatcher|worker``: the tf.data service's servers.

Start one dispatcher, then workers on the machines that should make the training batches, then
train with ``data.service=grpc://DISPATCHER:PORT`` (``keras_transformer.data.service``)::

    keras-transformer data-service dispatcher --port 5050 [--work-dir /shared/dispatcher]
    keras-transformer data-service worker --dispatcher grpc://host1:5050 --port 5051 \\
        --worker-address host2:5051
    keras-transformer train --config configs/x.yaml --shards /shared/prep \\
        data.service=grpc://host1:5050

Each server prints one line with its address (``... listening on grpc://HOST:PORT``) and runs
until it is killed (Ctrl-C or SIGTERM).
"""

from __future__ import annotations

import time


def add_data_service(commands, parent):
    p = commands.add_parser(
        "data-service",
        parents=[parent],
        help="run a tf.data service dispatcher or worker (training input across machines)",
        description="Serve training batches to `train` runs with data.service=grpc://HOST:PORT.",
    )
    roles = p.add_subparsers(dest="role", required=True)
    dispatcher = roles.add_parser(
        "dispatcher", parents=[parent], help="the coordinator: trainers and workers connect here"
    )
    dispatcher.add_argument("--port", type=int, default=5050, help="port (0: any free one)")
    dispatcher.add_argument(
        "--work-dir", default=None, help="journal folder: a restarted dispatcher resumes its jobs"
    )
    dispatcher.set_defaults(check=_check_port, func=_dispatcher)
    worker = roles.add_parser("worker", parents=[parent], help="a machine that makes batches")
    worker.add_argument(
        "--dispatcher", required=True, help="the dispatcher's address, grpc://HOST:PORT"
    )
    worker.add_argument("--port", type=int, default=0, help="port (0: any free one)")
    worker.add_argument(
        "--worker-address",
        default=None,
        help="HOST:PORT by which the dispatcher and trainers reach this worker "
        "(default localhost:PORT; give the machine's name on a cluster)",
    )
    worker.set_defaults(check=_check_port, func=_worker)


def _check_port(args) -> dict:
    """Before TensorFlow: the port."""
    from keras_transformer.cli.common import CommandError

    if not 0 <= args.port < 65536:
        raise CommandError(f"--port {args.port}: expected 0 (any free port) to 65535")
    return {}


def _serve(server, what: str, address: str) -> int:
    """Print the server's address, then serve until the process is stopped (Ctrl-C, SIGTERM).

    The servers run in TensorFlow's threads; this one sleeps in Python, where signals arrive
    (``server.join()`` would block them).
    """
    print(f"{what} listening on {address}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    return 0


def _dispatcher(args) -> int:
    from keras_transformer.data import service

    server = service.start_dispatcher(args.port, args.work_dir)
    return _serve(server, "tf.data dispatcher", server.target)


def _worker(args) -> int:
    from keras_transformer.cli.common import CommandError
    from keras_transformer.data import service

    try:
        service.service_address(args.dispatcher)
    except ValueError as error:
        raise CommandError(f"--dispatcher: {error}") from error
    server = service.start_worker(args.dispatcher, args.port, args.worker_address)
    # WorkerServer has no public address: its private one is "localhost:<bound port>".
    return _serve(server, "tf.data worker", args.worker_address or server._address)
