"""This process's Ray connection to a local cluster, with the cluster's token. ``ray`` is imported inside the functions,
after :func:`speak_auth`: Ray 2.60.0 reads its auth mode once, when ``ray._raylet`` is imported."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from raytpu.core.common.errors import RuntimeFailure
from raytpu.local.slice.procs import node_alive
from raytpu.local.slice.state import LocalCluster

HEAD_PROBE_S = 3.0
"""How long the head's GCS port gets to accept a connection before the head is reported unreachable."""


def speak_auth(cluster: LocalCluster) -> None:
    """This process speaks to ``cluster``: its token auth and its addresses (a stale exported ``RAY_ADDRESS`` would win
    over a Ray client's address: :meth:`LocalCluster.ray_cli_env`). Call it before Ray loads (see the module)."""
    os.environ.update(cluster.ray_cli_env())


def check_head(cluster: LocalCluster) -> None:
    """RuntimeFailure (exit 1, what to run) unless the head runs and its GCS port answers: a Ray client pointed at a
    dead GCS retries for minutes."""
    head = next((n for n in cluster.nodes if n.role == "head"), None)
    gone = f"the head of the cluster in {cluster.run_dir} is not running"
    if head is None or not node_alive(cluster, head):
        raise RuntimeFailure(f"local: {gone} (pid {head.pid if head else '-'})",
                             f"`raytpu local down --dir {cluster.run_dir}` (it clears what is left), then "
                             "`raytpu local up`")
    host, _, port = cluster.address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=HEAD_PROBE_S).close()
    except (OSError, ValueError) as exc:
        raise RuntimeFailure(f"local: {gone}: its GCS at {cluster.address} does not answer ({exc})",
                             f"`raytpu local down --dir {cluster.run_dir}`, then `raytpu local up`") from exc


def connect(cluster: LocalCluster) -> bool:
    """ray.init onto the cluster unless already connected; True when this call connected. RuntimeFailure when its
    head is gone (:func:`check_head`)."""
    check_head(cluster)
    speak_auth(cluster)
    import ray

    if ray.is_initialized():
        return False
    _keeping_sigterm(lambda: ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR,
                                      configure_logging=False))
    return True


def disconnect() -> None:
    """``ray.shutdown()``, this process's SIGTERM handler kept (:func:`_keeping_sigterm`)."""
    import ray

    _keeping_sigterm(ray.shutdown)


def _keeping_sigterm(call: Callable[[], object]) -> None:
    """Runs ``call`` (``ray.init``, ``ray.shutdown``), then puts back this process's SIGTERM handler. Ray's replaced a
    kit command's (an interrupt: its cleanup runs, exit 130; ``raytpu.cli``), and ``ray.shutdown`` left SIGTERM at its
    default, so a ``raytpu demo`` stopped once its slice was up left the slice running (docs/FACTS.md#local-sigterm).
    Source: Ray 2.60 ``ray.init`` (``sigterm_handler``), ``RayLog::InstallFailureSignalHandler``."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    try:
        call()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def wait_for_nodes(cluster: LocalCluster, count: int, timeout_s: float) -> list[dict[str, Any]]:
    """Waits until ``count`` nodes are alive in the GCS; returns ``ray.nodes()``."""
    connected = connect(cluster)  # first: it gives this process the cluster's token before Ray loads
    import ray

    try:
        deadline = time.monotonic() + timeout_s
        while True:
            nodes = [n for n in ray.nodes() if n.get("Alive")]
            if len(nodes) >= count:
                return nodes
            if time.monotonic() > deadline:
                raise RuntimeFailure(f"local: {len(nodes)} of {count} nodes registered within {timeout_s:.0f}s")
            time.sleep(0.3)
    finally:
        if connected:
            disconnect()
