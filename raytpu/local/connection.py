"""This process's Ray connection to a local cluster, with the cluster's token.

``ray`` is imported inside the functions, after :func:`speak_auth`: Ray 2.60.0 reads its auth mode once, when
``ray._raylet`` is imported.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from raytpu.core.errors import RuntimeFailure
from raytpu.local.state import LocalCluster


def speak_auth(cluster: LocalCluster) -> None:
    """This process uses ``cluster``'s token auth. Call it before Ray loads: Ray reads its auth mode once, when
    ``ray._raylet`` is imported."""
    os.environ.update(cluster.auth_env())


def connect(cluster: LocalCluster) -> bool:
    """ray.init onto the cluster unless already connected; True when this call connected."""
    speak_auth(cluster)
    import ray

    if ray.is_initialized():
        return False
    ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR,
             configure_logging=False)
    return True


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
            ray.shutdown()
