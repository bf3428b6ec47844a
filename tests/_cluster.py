"""Helpers for tests that run several worker processes on 127.0.0.1 (tf.distribute clusters)."""

import socket
import subprocess
import time


def free_ports(count):
    """``count`` ports free on 127.0.0.1 right now (held together, so they differ)."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def wait_all(processes, timeout_s):
    """Waits for ``[(Popen, log file)]`` within one shared budget (workers wait on each other);
    kills what is still running, closes the logs; returns exit codes (or "timeout")."""
    deadline = time.monotonic() + timeout_s
    codes = []
    try:
        for process, _ in processes:
            try:
                codes.append(process.wait(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append("timeout")
    finally:
        for process, log in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
            log.close()
    return codes
