"""The Ray backend: points as Ray tasks on a running cluster (the only importer of ``ray``).

``ray.init(address=...)`` joins an existing cluster (``ray start --head`` or a managed one):
``auto`` finds the one this machine runs, ``HOST:PORT`` names its GCS. The workload is put
into the object store once (``ray.put``) and every task gets its reference, so it crosses
the network once per node, not once per point. A task whose worker process dies (killed, out
of memory, node lost) is retried by Ray up to :data:`MAX_RETRIES` times; application errors
are not retried (the job's function turns user errors into a failed point itself).
"""

from __future__ import annotations

import logging
import socket
import sys
from typing import Any, TextIO

from kvscope.errors import KvscopeError
from kvscope.executor.store import PointResult

#: Times Ray re-runs a task whose worker died (Ray's ``max_retries``).
MAX_RETRIES = 3
#: Seconds to wait for a named cluster's port to answer before giving up.
CONNECT_TIMEOUT_S = 5.0
#: This process's stdout while connected: Ray's driver prints the cluster's error messages
#: ("A worker died ...") to ``sys.stdout`` from a thread, so stdout points at stderr until
#: :meth:`RayRunner.close`, and ``--json`` output stays one JSON document.
_STDOUT: list[TextIO] = []


def kvscope_point(fn: Any, payload: Any, shared: Any) -> PointResult:
    """One point in a Ray worker (its process title reads ``ray::kvscope_point``)."""
    result: PointResult = fn(payload, shared)
    return result


def _probe(address: str) -> None:
    """A named address must answer on its port before ``ray.init`` (which would wait long)."""
    host, sep, port = address.rpartition(":")
    if address.startswith(("ray://", "http://", "https://")) or not sep:
        return  # a Ray client or dashboard URL: let Ray say what is wrong
    try:
        port_n = int(port)
    except ValueError:
        raise KvscopeError(f"--ray {address}: expected 'auto' or HOST:PORT.") from None
    try:
        with socket.create_connection((host or "127.0.0.1", port_n), CONNECT_TIMEOUT_S):
            pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise KvscopeError(
            f"--ray {address}: no Ray cluster answers there ({reason}).",
            "Start one with `ray start --head` and pass the address it prints, or --ray auto.",
        ) from None


def connect(address: str) -> Any:
    """Join the cluster at ``address``; returns the ``ray`` module."""
    try:
        import ray
    except ImportError:
        raise KvscopeError(
            "--ray needs Ray: install kvscope[ray] (pip install 'kvscope[ray]')."
        ) from None
    if address != "auto":
        _probe(address)
    if ray.is_initialized():
        return ray
    _STDOUT.append(sys.stdout)
    sys.stdout = sys.stderr
    try:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as err:
        sys.stdout = _STDOUT.pop()
        first = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
        raise KvscopeError(f"--ray {address}: cannot join the Ray cluster ({first}).") from None
    return ray


class RayRunner:
    """Submit points as Ray tasks; wait for whichever finishes first."""

    def __init__(self, address: str, shared: Any) -> None:
        ray = connect(address)
        self._ray = ray
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.capacity = max(cpus, 1)
        self._shared = ray.put(shared)
        self._remote = ray.remote(max_retries=MAX_RETRIES, num_cpus=1)(kvscope_point)

    def submit(self, fn: Any, payload: Any) -> Any:
        return self._remote.remote(fn, payload, self._shared)

    def wait(self, handles: list[Any]) -> list[tuple[Any, PointResult]]:
        done, _ = self._ray.wait(handles, num_returns=1)
        return [(h, self._ray.get(h)) for h in done]

    def close(self, cancel: bool = False) -> None:
        self._ray.shutdown()  # leaves the cluster; the cluster itself keeps running
        if _STDOUT:
            sys.stdout = _STDOUT.pop()
            _STDOUT.clear()
