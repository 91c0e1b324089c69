"""One node's ``ray start``: its command line, environment, ports, log and temp dir. Each node leads a new session
(its daemons stay in it), is recorded as soon as launched and carries the cluster's tag, so
:func:`raytpu.local.slice.procs.stop` finds it."""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
from pathlib import Path

from raytpu.core.common.errors import RuntimeFailure
from raytpu.core.common.interrupt import interrupts_held
from raytpu.core.manifests.serving import DIRECT_STREAMING_ENV, SERVE_HOT_PATH_ENV
from raytpu.core.tpu.plan import SlicePlan
from raytpu.local.slice import procs
from raytpu.local.slice.emulation import WEBHOOK_ENV, host_env
from raytpu.local.slice.state import ENV_CLUSTER, LocalCluster, NodeProc
from raytpu.workloads.support.job_worker_env import SERVING_ONLY_ENV

HOST_CPUS = 2
"""Logical CPUs per emulated host: one for the slice bundle, one spare for helpers."""
HEAD_CPUS = 2
OBJECT_STORE_BYTES = 128 * 1024 * 1024

_PORTS_GIVEN: set[int] = set()
"""Ports already handed out by this process (the kernel may offer a just-closed port again)."""


def free_port() -> int:
    """A free TCP port not handed out before by this process."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _PORTS_GIVEN:
            _PORTS_GIVEN.add(port)
            return port
    raise RuntimeFailure("local: no free TCP port found")


NO_FIRST_DRIVER_PRESTART = {"RAY_prestart_worker_first_driver": "0"}
"""Ray's raylet starts idle workers for the first driver it sees; on the emulated head that is the kit's own node
check (:func:`raytpu.local.slice.connection.wait_for_nodes`), so both sat idle through every later job (0.6 CPU-s each
on 2 cores, bench/demo_cpu.py --workers). A value in this process's environment wins.
Source: Ray 2.60 ``ray_config_def.h`` ``prestart_worker_first_driver``."""


LOCAL_HAPROXY_ENV = {"RAY_SERVE_HAPROXY_NBTHREAD": "1"}
"""Serve's HAProxy on the emulated slice runs one thread, not Ray's 4: on a 2-core machine the app's 16 streams reached
0.85x of vLLM's own server's tokens/s with four, 0.99x with one (docs/FACTS.md#ray-serve-16-streams). A value in this
process's environment wins.
Source: Ray 2.60 ``ray/serve/_private/constants.py`` ``RAY_SERVE_HAPROXY_NBTHREAD``."""


def _base_env(cluster: LocalCluster) -> dict[str, str]:
    """Every node's environment: this process's (a value set here wins over the kit's serving defaults,
    :data:`raytpu.core.manifests.serving.SERVE_HOT_PATH_ENV` and
    :data:`~raytpu.core.manifests.serving.DIRECT_STREAMING_ENV`: the local twin streams direct, and a team run's workers
    drop the latter: :mod:`raytpu.workloads.support.job_worker_env`), Ray's token auth, the cluster's tag, and this
    cluster's own addresses (never the caller's ``RAY_ADDRESS``): every worker a node starts inherits them, so Ray code
    that finds its cluster by itself (Ray Train's ``PlacementGroupCleaner`` reads the State API with no address) reaches
    this cluster when another runs on the machine (issue 48).
    Source: Ray 2.60 ``ray._private.services.canonicalize_bootstrap_address_or_die`` ("Found multiple active Ray
    instances" without ``RAY_ADDRESS``)."""
    own = {k: v for k, v in os.environ.items() if k not in WEBHOOK_ENV and k != "RAY_ADDRESS"}
    env = SERVE_HOT_PATH_ENV | DIRECT_STREAMING_ENV | LOCAL_HAPROXY_ENV | NO_FIRST_DRIVER_PRESTART | own
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1", ENV_CLUSTER: cluster.temp_dir,
                SERVING_ONLY_ENV: ",".join(DIRECT_STREAMING_ENV), **cluster.ray_cli_env()})
    return env


RAY_CLI = ("import sys; sys.modules['ray.serve.scripts'] = None; from ray.scripts import scripts; "
           "scripts.get_ray_client_dependency_error = lambda: ImportError('no Ray Client on an emulated node'); "
           "sys.argv[0] = 'ray'; scripts.main()")
"""Ray's own CLI (``ray start ...``) without its optional ``serve`` subcommand group, which ``ray start`` never uses
(Ray's CLI skips it when its import fails), and without a Ray Client server on the head, which no kit command
speaks to (Ray gives the head one when the client's dependencies import, and refuses port 0 for it): less CPU per
node (docs/FACTS.md#local-start-limits).
Source: Ray 2.60 ``ray.scripts.scripts`` (``from ray.serve.scripts import cli`` in a ``try``; ``start``:
``has_ray_client`` sets ``ray_client_server_port = 10001``), ``ray._private.node.Node.start_head_processes``."""


def _node_args(cluster: LocalCluster, head: bool, temp: str) -> list[str]:
    """``ray start`` for one node. Ray picks a host's ports itself (0, and agents write port files), so hosts starting
    together never race; the head's GCS and dashboard ports are chosen here, known in advance."""
    args = [sys.executable, "-c", RAY_CLI, "start", "--disable-usage-stats", "--temp-dir", temp,
            "--include-log-monitor", "true" if cluster.log_monitor else "false",
            "--object-store-memory", str(OBJECT_STORE_BYTES), "--node-ip-address", "127.0.0.1",
            # Ray's default is a fixed 52365, which every second node on one machine would lose
            "--dashboard-agent-listen-port", "0", "--log-style", "record"]
    if head:
        port = cluster.address.rsplit(":", 1)[1]
        # the dashboard serves Ray's Job Submission API (`raytpu submit --local`), as the head on GKE does
        dashboard_port = cluster.dashboard.rsplit(":", 1)[1]
        args += ["--head", "--port", port, "--num-cpus", str(HEAD_CPUS), "--include-dashboard", "true",
                 "--dashboard-host", "127.0.0.1", "--dashboard-port", dashboard_port]
    else:
        args += ["--address", cluster.address]
    return args


def _spawn(cluster: LocalCluster, role: str, env: dict[str, str], args: list[str], name: str, temp: str,
           slice_name: str = "", worker_id: int = -1) -> NodeProc:
    """Runs ``ray start`` as the leader of a new session; the node's daemons stay in its process group. Started and
    recorded with Ctrl-C held: one in between left a node no stop knew of (issue 68)."""
    log = Path(cluster.run_dir) / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with interrupts_held(), open(log, "wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=cluster.run_dir)
        procs.track(proc)
        node = NodeProc(role=role, pid=proc.pid, log=str(log), slice_name=slice_name, worker_id=worker_id, temp=temp)
        cluster.nodes.append(node)
        cluster.save()
    return node


def _node_temp(cluster: LocalCluster) -> str:
    """A new node's own ``--temp-dir`` (its session, logs and sockets): one per start attempt."""
    return f"{cluster.temp_dir}/{len(cluster.nodes)}-{secrets.token_hex(2)}"


def start_head(cluster: LocalCluster) -> NodeProc:
    """Launches the head (no TPU; the GCS, the dashboard and its Job Submission API)."""
    temp = _node_temp(cluster)
    return _spawn(cluster, "head", _base_env(cluster), _node_args(cluster, True, temp), "head", temp)


def start_host(cluster: LocalCluster, plan: SlicePlan, slice_name: str, worker_id: int) -> NodeProc:
    """Launches one emulated TPU host: the webhook's environment and ``{"TPU": chips_per_host}``."""
    env = _base_env(cluster) | host_env(plan, slice_name, worker_id)
    temp = _node_temp(cluster)
    args = [*_node_args(cluster, False, temp), "--num-cpus", str(HOST_CPUS),
            "--resources", json.dumps({"TPU": plan.chips_per_host})]
    return _spawn(cluster, "host", env, args, f"{slice_name}-w{worker_id}", temp, slice_name, worker_id)
