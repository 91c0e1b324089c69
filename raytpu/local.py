"""An emulated TPU slice on the local machine: real Ray processes that look to Ray like GKE TPU hosts.

One Ray head (no TPU) plus one ``ray start --block`` process per emulated host. Each host process
gets the environment the GKE TPU webhook injects (``TPU_NAME``, ``TPU_WORKER_ID``,
``TPU_WORKER_HOSTNAMES``, ``TPU_ACCELERATOR_TYPE``, ``TPU_TOPOLOGY``) and ``{"TPU": chips_per_host}``;
Ray's own TPU accelerator manager then derives, exactly as on GKE, the resources
``accelerator_type:TPU-V6E``, ``<TPU_NAME>`` and ``TPU-v6e-16-head`` (worker 0) and the labels
``ray.io/accelerator-type``, ``ray.io/tpu-slice-name``, ``ray.io/tpu-worker-id``,
``ray.io/tpu-topology`` and ``ray.io/tpu-pod-type``. The "chips" are JAX CPU devices:
``JAX_PLATFORMS=cpu`` and ``JAX_NUM_CPU_DEVICES=<chips_per_host>`` in each host's environment.

Every process is its own process group (``ray start`` makes itself a group leader), recorded by PID
in a run directory (``$RAYTPU_LOCAL_DIR``, default ``.raytpu/local`` under the working directory),
so ``raytpu local up|status|down`` work across invocations and :func:`stop` always cleans up: it
signals each recorded group, then any leftover process whose command line names this cluster's
private Ray temp dir. It never touches Ray processes it did not start.

Standard library and psutil at import; ``ray`` is imported inside the functions that talk to the cluster.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from raytpu import node_start
from raytpu.catalog import generation
from raytpu.errors import RuntimeFailure, invalid_value
from raytpu.kinds import kind
from raytpu.kuberay import AUTH_MODE
from raytpu.plan import SlicePlan
from raytpu.report import text_table
from raytpu.spec import SliceSpec, WorkloadSpec

STATE_FILE = "cluster.json"
ENV_RUN_DIR = "RAYTPU_LOCAL_DIR"
ENV_CLUSTER = "RAYTPU_LOCAL_CLUSTER"
"""Set to the cluster's private temp dir in every process of a local cluster (nodes, their workers, drivers
started by :func:`run_workload`): how :func:`stop` and the test suite find them all, reparented or not."""
ENV_EMULATED = "RAYTPU_EMULATED"
"""Set to ``1`` in every emulated host's environment; the smoke check reads it (perf checks informational)."""

DEFAULT_RUN_DIR = Path(".raytpu") / "local"
TMP_PREFIX = "/tmp/raytpu-"
ENV_TMP_PREFIX = "RAYTPU_LOCAL_TMP_PREFIX"
HOST_CPUS = 2
"""Logical CPUs per emulated host: one for the slice bundle, one spare for helpers."""
HEAD_CPUS = 2
OBJECT_STORE_BYTES = 128 * 1024 * 1024

Progress = Callable[[str], None]

_WEBHOOK_ENV = ("TPU_NAME", "TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES", "TPU_ACCELERATOR_TYPE", "TPU_TOPOLOGY",
                "TPU_PROCESS_ADDRESSES", "TPU_PROCESS_PORT", "TPU_VISIBLE_CHIPS", "JAX_PLATFORMS",
                "JAX_NUM_CPU_DEVICES")


@dataclass
class NodeProc:
    """One ``ray start --block`` process (a process-group leader) and what it emulates.

    Attributes:
        role: ``head`` or ``host``.
        pid: PID of the ``ray start`` process; also its process group id.
        log: Its stdout/stderr file.
        slice_name: The emulated slice (``TPU_NAME``); empty for the head.
        worker_id: ``TPU_WORKER_ID``; -1 for the head.
        killed: True once :func:`kill_host` has taken it down on purpose.
        temp: The node's own ``--temp-dir`` (its Ray session and logs).
    """

    role: str
    pid: int
    log: str
    slice_name: str = ""
    worker_id: int = -1
    killed: bool = False
    temp: str = ""


@dataclass
class LocalCluster:
    """The recorded state of one local emulated cluster (``<run dir>/cluster.json``).

    Attributes:
        run_dir: Where state and logs live.
        temp_dir: Ray's private temp dir (short, under /tmp, for unix socket paths).
        address: GCS address ``host:port`` (what ``ray.init(address=...)`` and ``RAY_ADDRESS`` take).
        plan: The SlicePlan of every slice, as JSON.
        slices: Emulated slice names (``TPU_NAME``), one per slice.
        nodes: Every process started, head first.
        started_s: Seconds from the first ``ray start`` until every node had registered.
        dashboard: URL of the head's dashboard (Ray's Job Submission API).
        auth_token_path: The file holding the cluster's Ray auth token (:func:`auth_token_file`).
    """

    run_dir: str
    temp_dir: str
    address: str
    plan: dict[str, Any]
    slices: list[str]
    nodes: list[NodeProc] = field(default_factory=list)
    started_s: float = 0.0
    dashboard: str = ""
    auth_token_path: str = ""

    def auth_env(self) -> dict[str, str]:
        """Ray's token authentication, as on GKE (``raytpu.kuberay.AUTH_MODE``): every node, worker and driver
        of the cluster reads the token from :attr:`auth_token_path` (``RAY_AUTH_TOKEN_PATH``)."""
        return {"RAY_AUTH_MODE": AUTH_MODE, "RAY_AUTH_TOKEN_PATH": self.auth_token_path}

    @property
    def slice_plan(self) -> SlicePlan:
        """The SlicePlan every slice of this cluster follows."""
        return SlicePlan.from_json(self.plan)

    @property
    def slice_spec(self) -> SliceSpec:
        """The emulated slices as one SliceSpec (``count`` = slices here), what workloads are given."""
        plan = self.slice_plan
        return SliceSpec(name="local", plan=plan, zone=generation(plan.generation).zones[0], count=len(self.slices))

    def workload(self, kind_name: str) -> WorkloadSpec:
        """The spec a workload of ``kind_name`` run on these slices receives (``RAYTPU_WORKLOAD``)."""
        return WorkloadSpec(name=f"local-{kind_name}", kind=kind(kind_name), slice=self.slice_spec)

    def hosts(self, slice_name: str | None = None) -> list[NodeProc]:
        """Host processes (not killed), optionally of one slice."""
        return [n for n in self.nodes if n.role == "host" and not n.killed
                and (slice_name is None or n.slice_name == slice_name)]

    def save(self) -> None:
        """Writes the state file atomically, nodes in (head, slice, worker id) order whatever order they started
        in: every listing of the cluster reads them in that order."""
        rank = {name: i for i, name in enumerate(self.slices)}
        self.nodes.sort(key=lambda n: (n.role != "head", rank.get(n.slice_name, len(rank)), n.worker_id))
        path = Path(self.run_dir) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, run_dir: str | Path) -> LocalCluster | None:
        """The cluster recorded in ``run_dir``, or None when there is none."""
        path = Path(run_dir) / STATE_FILE
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        data["nodes"] = [NodeProc(**n) for n in data.get("nodes", [])]
        return cls(**data)

    def driver_env(self) -> dict[str, str]:
        """Environment for a driver process (``python -m raytpu.workloads.smoke``) on this cluster."""
        env = {k: v for k, v in os.environ.items() if k not in _WEBHOOK_ENV}
        env.update({"RAY_ADDRESS": self.address, ENV_EMULATED: "1", "RAY_USAGE_STATS_ENABLED": "0",
                    ENV_CLUSTER: self.temp_dir, **self.auth_env()})
        return env


def run_dir(explicit: str | Path | None = None) -> Path:
    """The run directory: ``explicit``, else ``$RAYTPU_LOCAL_DIR``, else ``./.raytpu/local``."""
    chosen = explicit or os.environ.get(ENV_RUN_DIR) or DEFAULT_RUN_DIR
    return Path(chosen).resolve()


def temp_prefix() -> str:
    """Prefix of a new cluster's private Ray temp dir: ``$RAYTPU_LOCAL_TMP_PREFIX`` (tests), else ``/tmp/raytpu-``.

    Always under ``/tmp/raytpu-`` (short unix socket paths; :func:`stop` only sweeps such dirs).
    """
    prefix = os.environ.get(ENV_TMP_PREFIX, TMP_PREFIX)
    if not prefix.startswith(TMP_PREFIX) or "/" in prefix[len(TMP_PREFIX):]:
        raise invalid_value(ENV_TMP_PREFIX, prefix, f"must start with {TMP_PREFIX} and name no subdirectory",
                            f"{TMP_PREFIX}<letters>-")
    return prefix


def slice_names(plan: SlicePlan, count: int, prefix: str = "raytpu-local") -> list[str]:
    """Names of ``count`` emulated slices of ``plan`` (the ``TPU_NAME`` GKE would give each)."""
    return [f"{prefix}-{plan.ray_pod_type}-{i}" for i in range(count)]


def host_env(plan: SlicePlan, slice_name: str, worker_id: int) -> dict[str, str]:
    """What the GKE TPU webhook and the KubeRay worker group put in one TPU host's environment.

    Plus the emulation of chips as JAX CPU devices (``JAX_PLATFORMS=cpu``,
    ``JAX_NUM_CPU_DEVICES=chips_per_host``) and ``RAYTPU_EMULATED=1``.
    """
    env = {
        "TPU_NAME": slice_name,
        "TPU_WORKER_ID": str(worker_id),
        "TPU_ACCELERATOR_TYPE": plan.gke_accelerator_type,
        "TPU_TOPOLOGY": plan.topology,
        "JAX_PLATFORMS": "cpu",
        "JAX_NUM_CPU_DEVICES": str(plan.chips_per_host),
        ENV_EMULATED: "1",
    }
    if not plan.single_host:
        env["TPU_WORKER_HOSTNAMES"] = ",".join(f"{slice_name}-w{i}" for i in range(plan.hosts))
    return env


_PORTS_GIVEN: set[int] = set()
"""Ports already handed out by this process (the kernel may offer a just-closed port again)."""


def _free_port() -> int:
    """A free TCP port not handed out before by this process."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _PORTS_GIVEN:
            _PORTS_GIVEN.add(port)
            return port
    raise RuntimeFailure("local: no free TCP port found")


def _base_env(cluster: LocalCluster) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _WEBHOOK_ENV and k != "RAY_ADDRESS"}
    env.update({"RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1", ENV_CLUSTER: cluster.temp_dir,
                **cluster.auth_env()})
    return env


def _ray_exe() -> str:
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else (shutil.which("ray") or "ray")


def _node_args(cluster: LocalCluster, head: bool, temp: str) -> list[str]:
    """``ray start`` for one node. Ray picks every port of a host itself (node manager and object manager 0, each
    agent binds 0 and writes its port file), so hosts starting together never race for ports; only the head's GCS,
    dashboard and Ray client ports are the emulator's (they must be known in advance, and Ray 2.60.0 refuses 0 for
    the client server's: ``ray._private.parameter.RayParams._check_usage``)."""
    args = [_ray_exe(), "start", "--disable-usage-stats", "--temp-dir", temp, "--include-log-monitor", "false",
            "--object-store-memory", str(OBJECT_STORE_BYTES), "--node-ip-address", "127.0.0.1",
            # Ray's default is a fixed 52365, which every second node on one machine would lose
            "--dashboard-agent-listen-port", "0", "--log-style", "record"]
    if head:
        port = cluster.address.rsplit(":", 1)[1]
        # the dashboard serves Ray's Job Submission API (`raytpu submit --local`), as the head on GKE does
        dashboard_port = cluster.dashboard.rsplit(":", 1)[1]
        args += ["--head", "--port", port, "--num-cpus", str(HEAD_CPUS), "--include-dashboard", "true",
                 "--dashboard-host", "127.0.0.1", "--dashboard-port", dashboard_port,
                 "--ray-client-server-port", str(_free_port())]
    else:
        args += ["--address", cluster.address]
    return args


def _spawn(cluster: LocalCluster, role: str, env: dict[str, str], args: list[str], name: str, temp: str,
           slice_name: str = "", worker_id: int = -1) -> NodeProc:
    """Runs ``ray start`` as the leader of a new session; the node's daemons stay in its process group."""
    log = Path(cluster.run_dir) / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=cluster.run_dir)
    _STARTERS[proc.pid] = proc
    node = NodeProc(role=role, pid=proc.pid, log=str(log), slice_name=slice_name, worker_id=worker_id, temp=temp)
    cluster.nodes.append(node)
    cluster.save()
    return node


def _node_temp(cluster: LocalCluster) -> str:
    """A new node's own ``--temp-dir`` (its session, logs and sockets): one per start attempt."""
    return f"{cluster.temp_dir}/{len(cluster.nodes)}-{secrets.token_hex(2)}"


def _start_head(cluster: LocalCluster) -> NodeProc:
    temp = _node_temp(cluster)
    return _spawn(cluster, "head", _base_env(cluster), _node_args(cluster, True, temp), "head", temp)


def _start_host(cluster: LocalCluster, plan: SlicePlan, slice_name: str, worker_id: int) -> NodeProc:
    env = _base_env(cluster) | host_env(plan, slice_name, worker_id)
    temp = _node_temp(cluster)
    args = [*_node_args(cluster, False, temp), "--num-cpus", str(HOST_CPUS),
            "--resources", json.dumps({"TPU": plan.chips_per_host})]
    return _spawn(cluster, "host", env, args, f"{slice_name}-w{worker_id}", temp, slice_name, worker_id)


_STARTERS: dict[int, subprocess.Popen[bytes]] = {}
"""``ray start`` processes of this Python process, by PID (to collect their exit codes)."""


def _live() -> Iterator[psutil.Process]:
    """Every live (non-zombie) process but this one, with its environment-free attributes cached."""
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "status"]):
        if proc.info["pid"] != me and proc.info["status"] != psutil.STATUS_ZOMBIE:
            yield proc


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _group(pgid: int) -> list[int]:
    """Live (non-zombie) PIDs in process group ``pgid``."""
    members = []
    for proc in _live():
        with contextlib.suppress(OSError):
            if os.getpgid(proc.pid) == pgid:
                members.append(proc.pid)
    return members


def _cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ""


def _environ(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except psutil.Error:
        return {}


def _ours(pgid: int, temp_dir: str) -> list[int]:
    """Members of ``pgid`` if that group is still one of this cluster's nodes (a member names ``temp_dir``).

    Guards against signalling a recycled process group id.
    """
    members = _group(pgid)
    return members if any(temp_dir in _cmdline(p) for p in members) else []


def node_alive(cluster: LocalCluster, node: NodeProc) -> bool:
    """The node's process group still runs (its raylet and friends), and it was not killed on purpose."""
    return not node.killed and bool(_ours(node.pid, cluster.temp_dir))


def _reap(pid: int) -> None:
    proc = _STARTERS.get(pid)
    if proc is not None:
        proc.poll()
        return
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


START_RETRIES = 2
"""A node whose start failed for a cause a restart can fix (:mod:`raytpu.node_start`) is started again this many
times."""
HEAD = ("", -1)
"""The head's key among the nodes :func:`_start_nodes` starts; a host's is ``(slice name, worker id)``."""


def start_slots() -> int:
    """How many hosts start at once at first: one per core this process may run on.

    A host's dashboard agent needs about 3 CPU-seconds before Ray's fixed 15 s port-file wait runs out
    (:mod:`raytpu.node_start`). Measured on 2 cores (``bench/local_start.py --slots 1 2 4``): 4 at once came up
    with 1 s to spare quiet; one per core took 11 s a host under load; one at a time is the slowest.
    :func:`_start_nodes` drops to one at a time as soon as a host is slow to start.
    """
    return max(1, len(os.sched_getaffinity(0)))


SLOW_START_S = node_start.AGENT_PORT_WAIT_S * 2 / 3
"""A host that took longer than this to start came close to Ray's 15 s agent wait: the rest start one at a time."""


def start_timeout_s(nodes: int) -> float:
    """The default bound on starting ``nodes`` nodes: room for each to start alone, then again after a failure
    (Ray's own limits are 15 s for the agents and 30 s for registration, :mod:`raytpu.node_start`)."""
    return 60.0 + 2 * node_start.REGISTER_WAIT_S * nodes


def _key(node: NodeProc) -> tuple[str, int]:
    return node.slice_name, node.worker_id


def _what(key: tuple[str, int]) -> str:
    return "head" if key == HEAD else f"{key[0]} worker {key[1]}"


def _exit_code(node: NodeProc) -> int | None:
    proc = _STARTERS.get(node.pid)
    return proc.poll() if proc is not None else (None if _alive(node.pid) else 0)


def _phase(node: NodeProc) -> str:
    """Where a node still starting is, from its files: what a deadline message names."""
    if not node_start.raylet_logs(node.temp):
        return "`ray start` still starting its processes"
    return "its raylet waits for its agents or for the GCS"


def _discard(cluster: LocalCluster, node: NodeProc) -> None:
    """Kills a failed start's leftovers (a raylet, agents) and forgets it; its logs stay."""
    _sigkill(_ours(node.pid, cluster.temp_dir))
    _reap(node.pid)
    cluster.nodes.remove(node)
    cluster.save()


def _launch(cluster: LocalCluster, key: tuple[str, int]) -> NodeProc:
    if key == HEAD:
        return _start_head(cluster)
    return _start_host(cluster, cluster.slice_plan, *key)


def _start_nodes(cluster: LocalCluster, keys: list[tuple[str, int]], slots: int, deadline: float,
                 progress: Progress, t0: float) -> None:
    """Starts the nodes ``keys`` at most ``slots`` at a time and returns once each has registered.

    A failure is classified by :func:`raytpu.node_start.diagnose`; an agent abort is read from the raylet's log as
    it happens. Port races are retried on new ports, a slow agent or registration alone (``slots`` drops to 1);
    anything else, or a node out of retries, raises at once with its cause, remedy and log.
    """
    queue = list(keys)
    running: list[NodeProc] = []
    launched: dict[int, float] = {}
    tries = dict.fromkeys(keys, 0)
    head = next((n for n in cluster.nodes if n.role == "head"), None)
    while queue or running:
        while queue and len(running) < slots:
            running.append(_launch(cluster, queue.pop(0)))
            launched[running[-1].pid] = time.monotonic()
        for node in list(running):
            code = _exit_code(node)
            if code == 0:
                running.remove(node)
                took = time.monotonic() - launched[node.pid]
                progress(f"  {_what(_key(node))} up ({time.monotonic() - t0:.1f}s)")
                if slots > 1 and took > SLOW_START_S:
                    slots = 1
                    progress(f"  a host took {took:.0f}s to start (Ray aborts one whose agents need more than "
                             f"{node_start.AGENT_PORT_WAIT_S}s): starting the rest one at a time")
                continue
            failure = (node_start.agent_abort(node.temp) if code is None
                       else node_start.diagnose(Path(node.log).read_text(errors="replace"), node.temp))
            if failure is None:
                continue
            running.remove(node)
            _discard(cluster, node)
            key = _key(node)
            tries[key] += 1
            if not failure.retry or tries[key] > START_RETRIES:
                raise RuntimeFailure(f"local.{failure.message(_what(key))} (log {node.log}; raylet log under "
                                     f"{node.temp})")
            progress(f"  {failure.message(_what(key))}")
            if key == HEAD and failure.retry == "new ports":
                cluster.address = f"127.0.0.1:{_free_port()}"
                cluster.dashboard = f"http://127.0.0.1:{_free_port()}"
            if failure.retry == "alone":
                slots = 1
            queue.insert(0, key)
        if head is not None and running and not node_alive(cluster, head):
            raise RuntimeFailure(f"local: {node_start.Cause.GCS.value}: the head stopped while hosts were starting "
                                 f"(log {head.log}); `raytpu local down`, then `raytpu local up`")
        if (queue or running) and time.monotonic() > deadline:
            late = [f"{_what(_key(n))} ({_phase(n)}, log {n.log})" for n in running]
            late += [f"{_what(key)} (not started)" for key in queue]
            raise RuntimeFailure(f"local: not up within {deadline - t0:.0f}s: " + "; ".join(late)
                                 + "; valid: a larger --timeout-s, or fewer emulated hosts")
        if queue or running:
            time.sleep(0.2)


def auth_token_file(where: Path) -> Path:
    """The cluster's Ray auth token file: this process's own token when it has one (``RAY_AUTH_TOKEN`` or
    ``RAY_AUTH_TOKEN_PATH``; Ray caches one token per process, so every cluster one process drives shares it),
    else a new random token in ``<run dir>/auth_token`` (mode 0600)."""
    given = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if given and Path(given).is_file():
        return Path(given).resolve()
    path = (where / "auth_token").resolve()  # absolute: every node runs in the run dir, the driver may not
    path.touch(mode=0o600)
    path.write_text(os.environ.get("RAY_AUTH_TOKEN") or secrets.token_hex(32))
    return path


def start(plan: SlicePlan, num_slices: int = 1, directory: str | Path | None = None,
          progress: Progress | None = None, timeout_s: float | None = None,
          prefix: str = "raytpu-local", slots: int | None = None) -> LocalCluster:
    """Starts a head plus ``num_slices`` emulated slices of ``plan``; stops everything on failure.

    Args:
        plan: The slice shape (hosts, chips per host, pod type) every slice follows.
        num_slices: How many such slices.
        directory: Run directory (default :func:`run_dir`).
        progress: Called with one line per milestone (the CLI writes them to stderr).
        timeout_s: Bound on the whole start, registration included (default :func:`start_timeout_s`).
        prefix: Slice name prefix (``TPU_NAME`` is ``<prefix>-<pod type>-<i>``).
        slots: How many hosts start at once (default :func:`start_slots`).

    Raises:
        InvalidInput: ``num_slices`` < 1.
        RuntimeFailure: a cluster is already recorded in the run directory, or a node failed to start.
    """
    if num_slices < 1:
        raise invalid_value("slices", num_slices, "must be at least 1", "1, 2, ...")
    say = progress or (lambda _line: None)
    where = run_dir(directory)
    existing = LocalCluster.load(where)
    if existing is not None and any(node_alive(existing, n) for n in existing.nodes):
        raise RuntimeFailure(f"local: a cluster is already running from {where} (address {existing.address}); "
                             "run `raytpu local down` first")
    if existing is not None:
        stop(where)
    where.mkdir(parents=True, exist_ok=True)
    temp_dir = f"{temp_prefix()}{secrets.token_hex(3)}"
    cluster = LocalCluster(run_dir=str(where), temp_dir=temp_dir, address=f"127.0.0.1:{_free_port()}",
                           plan=plan.to_json(), slices=slice_names(plan, num_slices, prefix),
                           dashboard=f"http://127.0.0.1:{_free_port()}", auth_token_path=str(auth_token_file(where)))
    cluster.save()
    hosts = [(name, w) for name in cluster.slices for w in range(plan.hosts)]
    slots = slots or start_slots()
    t0 = time.monotonic()
    deadline = t0 + (timeout_s or start_timeout_s(1 + len(hosts)))
    try:
        say(f"starting Ray head at {cluster.address} (run dir {where})")
        _start_nodes(cluster, [HEAD], 1, deadline, say, t0)
        say(f"starting {num_slices} emulated {plan.generation} {plan.topology} slice(s): "
            f"{plan.hosts} host(s) x {plan.chips_per_host} chips ({plan.machine_type}) each, {slots} at a time")
        _start_nodes(cluster, hosts, slots, deadline, say, t0)
        wait_for_nodes(cluster, 1 + len(hosts), max(deadline - time.monotonic(), 5.0))
        cluster.started_s = round(time.monotonic() - t0, 2)
        cluster.save()
        say(f"cluster ready in {cluster.started_s:.1f}s: {len(hosts)} host node(s), address {cluster.address}")
        return cluster
    except BaseException:
        stop(where)
        raise


def add_host(cluster: LocalCluster, slice_name: str, worker_id: int, timeout_s: float | None = None) -> NodeProc:
    """Starts (or restarts: a replacement) one host of ``slice_name``; returns once it is up."""
    t0 = time.monotonic()
    _start_nodes(cluster, [(slice_name, worker_id)], 1, t0 + (timeout_s or start_timeout_s(1)), lambda _l: None, t0)
    return next(n for n in cluster.hosts(slice_name) if n.worker_id == worker_id)


def kill_host(cluster: LocalCluster, slice_name: str, worker_id: int) -> NodeProc:
    """SIGKILLs one host's whole process group (a host failure) and records it as killed."""
    for node in cluster.hosts(slice_name):
        if node.worker_id == worker_id:
            workers = _host_processes(cluster, node)  # Ray workers run in their own sessions
            if _ours(node.pid, cluster.temp_dir):
                _signal_group(node.pid, signal.SIGKILL)
            _sigkill(workers)
            _reap(node.pid)
            node.killed = True
            cluster.save()
            return node
    raise RuntimeFailure(f"local: no live host {slice_name} worker {worker_id}")


def _host_processes(cluster: LocalCluster, node: NodeProc) -> list[int]:
    """Processes of one emulated host: tagged with the cluster and carrying the host's TPU_NAME/TPU_WORKER_ID."""
    want = {"TPU_NAME": node.slice_name, "TPU_WORKER_ID": str(node.worker_id)}
    found = []
    for pid in _processes_under(cluster.temp_dir):
        with contextlib.suppress(psutil.Error):
            environ = psutil.Process(pid).environ()
            if all(environ.get(k) == v for k, v in want.items()):
                found.append(pid)
    return found


def _sigkill(pids: Iterable[int]) -> None:
    """SIGKILL each of ``pids`` that still exists."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def tagged_processes(prefix: str = TMP_PREFIX) -> dict[int, str]:
    """Live processes carrying ``RAYTPU_LOCAL_CLUSTER=<prefix>...`` (any local cluster's): pid -> temp dir."""
    found = {}
    for proc in _live():
        tag = _environ(proc).get(ENV_CLUSTER, "")
        if tag.startswith(prefix):
            found[proc.pid] = tag
    return found


def _processes_under(temp_dir: str) -> Iterator[int]:
    """PIDs of this cluster: tagged with its temp dir, or naming it on their command line."""
    tagged = {p for p, t in tagged_processes(temp_dir).items() if t == temp_dir}
    yield from sorted(tagged)
    for proc in _live():
        if proc.pid not in tagged and temp_dir in _cmdline(proc.pid):
            yield proc.pid


def stop(directory: str | Path | None = None, grace_s: float = 1.0) -> int:
    """Stops the cluster recorded in the run directory; always removes its state. Returns processes signalled.

    SIGTERM to every recorded process group that is still this cluster's, SIGKILL to what is left after
    ``grace_s``, then SIGKILL to any leftover process naming this cluster's private temp dir. Safe to
    call when nothing runs; never signals a process this module did not start.
    """
    where = run_dir(directory)
    cluster = LocalCluster.load(where)
    if cluster is None:
        return 0
    groups = [n.pid for n in cluster.nodes if _ours(n.pid, cluster.temp_dir)]
    for pgid in reversed(groups):  # hosts first, head last
        _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_group(g) for g in groups):
        time.sleep(0.2)
    for pgid in groups:
        if _group(pgid):
            _signal_group(pgid, signal.SIGKILL)
    stragglers = list(_processes_under(cluster.temp_dir)) if cluster.temp_dir.startswith(TMP_PREFIX) else []
    _sigkill(stragglers)
    for node in cluster.nodes:
        _reap(node.pid)
    shutil.rmtree(cluster.temp_dir, ignore_errors=True)
    (where / STATE_FILE).unlink(missing_ok=True)
    return len(groups) + len(stragglers)


def _speak_auth(cluster: LocalCluster) -> None:
    """This process uses ``cluster``'s token auth. Call it before Ray loads: Ray reads its auth mode once, when
    ``ray._raylet`` is imported."""
    os.environ.update(cluster.auth_env())


def _connect(cluster: LocalCluster) -> bool:
    """ray.init onto the cluster unless already connected; True when this call connected."""
    _speak_auth(cluster)
    import ray

    if ray.is_initialized():
        return False
    ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR,
             configure_logging=False)
    return True


def wait_for_nodes(cluster: LocalCluster, count: int, timeout_s: float) -> list[dict[str, Any]]:
    """Waits until ``count`` nodes are alive in the GCS; returns ``ray.nodes()``."""
    connected = _connect(cluster)  # first: it gives this process the cluster's token before Ray loads
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


@dataclass(frozen=True)
class HostStatus:
    """One row of ``raytpu local status``."""

    slice_name: str
    worker_id: int
    pid: int
    node_id: str
    resources: str
    labels_ok: bool
    alive: bool


def status(cluster: LocalCluster) -> list[HostStatus]:
    """Every recorded node with what the GCS says about it (node id, resources, label check, liveness)."""
    connected = _connect(cluster)  # first: it gives this process the cluster's token before Ray loads
    import ray

    plan = cluster.slice_plan
    by_key: dict[tuple[str, int], dict[str, Any]] = {}
    head_node: dict[str, Any] = {}
    try:
        for node in ray.nodes():
            if not node.get("Alive"):
                continue
            labels = node.get("Labels") or {}
            if "ray.io/tpu-worker-id" in labels:
                by_key[(labels.get("ray.io/tpu-slice-name", ""), int(labels["ray.io/tpu-worker-id"]))] = node
            elif (node.get("Resources") or {}).get("node:__internal_head__"):
                head_node = node
    finally:
        if connected:
            ray.shutdown()
    rows = []
    for proc in cluster.nodes:
        if proc.role == "head":
            info = head_node
            labels_ok = True
        else:
            info = by_key.get((proc.slice_name, proc.worker_id), {})
            labels = info.get("Labels") or {}
            want = plan.ray_labels(proc.slice_name, proc.worker_id)
            labels_ok = all(labels.get(k) == v for k, v in want.items())
        resources = {k: v for k, v in (info.get("Resources") or {}).items()
                     if not k.startswith(("node:", "memory", "object_store_memory"))}
        rows.append(HostStatus(
            slice_name=proc.slice_name or "(head)", worker_id=proc.worker_id, pid=proc.pid,
            node_id=str(info.get("NodeID", ""))[:12],
            resources=", ".join(f"{k}={v:g}" for k, v in sorted(resources.items())),
            labels_ok=labels_ok, alive=node_alive(cluster, proc) and bool(info)))
    return rows


def render_status(rows: list[HostStatus]) -> str:
    """The status rows as a text table."""
    header = ("SLICE", "HOST", "PGID", "NODE", "ALIVE", "LABELS", "RESOURCES")
    body = [(r.slice_name, "-" if r.worker_id < 0 else str(r.worker_id), str(r.pid), r.node_id or "-",
             "yes" if r.alive else "NO", "ok" if r.labels_ok else "MISMATCH", r.resources) for r in rows]
    return "\n".join(text_table([header, *body], rule=False))


def workload_command(kind_name: str, *extra: str) -> list[str]:
    """``python -m raytpu.workloads.<program> ...``: what the RayJob entrypoint of kind ``kind_name`` runs."""
    return [sys.executable, "-m", kind(kind_name).module, *extra]


def run_workload(cluster: LocalCluster, kind_name: str, *extra: str, timeout_s: float = 600.0,
                 echo: Progress | None = None, work: WorkloadSpec | None = None) -> subprocess.CompletedProcess[str]:
    """Runs a workload as a driver process on the cluster (as a RayJob entrypoint would, its spec in
    ``RAYTPU_WORKLOAD``: ``work``, default :meth:`LocalCluster.workload`); bounded. stderr lines are passed to
    ``echo`` as they come (progress), stdout is captured.

    Raises:
        RuntimeFailure: the workload ran past ``timeout_s`` (it is killed).
    """
    cmd = workload_command(kind_name, *extra)
    env = cluster.driver_env() | (work or cluster.workload(kind_name)).env()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    err_lines: list[str] = []
    out_parts: list[str] = []

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            err_lines.append(line)
            if echo is not None:
                echo(line.rstrip("\n"))

    import threading

    # one reader per pipe: `communicate` would read stderr too and take lines from under `pump` (seen under load:
    # a failed smoke run's stderr came back empty)
    readers = [threading.Thread(target=pump, daemon=True),
               threading.Thread(target=lambda: out_parts.append(proc.stdout.read() if proc.stdout else ""),
                                daemon=True)]
    for reader in readers:
        reader.start()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        raise RuntimeFailure(f"local.{kind_name}: the workload ran past {timeout_s:g}s and was killed") from None
    for reader in readers:
        reader.join(timeout=30)
    return subprocess.CompletedProcess(cmd, proc.returncode, "".join(out_parts), "".join(err_lines))


def submit_job(cluster: LocalCluster, kind_name: str, *extra: str, timeout_s: float = 600.0,
               sink: Progress | None = None, poll_s: float = 1.0) -> str:
    """Submits a workload through Ray's Job Submission API (as KubeRay's submitter does on GKE), streams its
    driver log to ``sink`` and returns its final status (``SUCCEEDED``, ``FAILED``, ``STOPPED``).

    The job gets its spec in ``RAYTPU_WORKLOAD`` (runtime env), exactly as a RayJob's entrypoint does.

    Raises:
        RuntimeFailure: the job did not finish within ``timeout_s`` (it is stopped).
    """
    _speak_auth(cluster)  # the client sends the cluster's token
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(cluster.dashboard)
    env = cluster.workload(kind_name).env() | {ENV_EMULATED: "1"}
    job_id = client.submit_job(entrypoint=shlex.join(workload_command(kind_name, *extra)),
                               runtime_env={"env_vars": env})
    say = sink or (lambda _line: None)
    shown = 0
    deadline = time.monotonic() + timeout_s
    while True:
        status = client.get_job_status(job_id)
        logs = client.get_job_logs(job_id)
        for line in logs[shown:].splitlines():
            say(line)
        shown = len(logs)
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            return str(status.value)
        if time.monotonic() > deadline:
            client.stop_job(job_id)
            raise RuntimeFailure(f"local.{kind_name}: job {job_id} still {status.value} after {timeout_s:g}s; "
                                 "valid: a larger --timeout-s")
        time.sleep(poll_s)


def tree_processes(root: int | None = None, tag_prefix: str | None = None) -> set[int]:
    """``root`` (default: this process), its descendants and, with ``tag_prefix``, every process of a local
    cluster whose temp dir starts with it (node daemons are reparented away from us) and their descendants."""
    roots = [os.getpid() if root is None else root, *(tagged_processes(tag_prefix) if tag_prefix else [])]
    seen: set[int] = set()
    for pid in roots:
        with contextlib.suppress(psutil.Error):
            seen.add(pid)
            seen.update(child.pid for child in psutil.Process(pid).children(recursive=True))
    return seen


def memory_bytes(pids: set[int]) -> tuple[int, int]:
    """(sum of RSS, sum of PSS) of ``pids``.

    RSS counts a page shared by n processes n times (an upper bound); PSS charges each process 1/n
    of it, so the PSS sum is the footprint the group really holds in memory.
    """
    rss = pss = 0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            info = psutil.Process(pid).memory_full_info()
            rss += info.rss
            pss += getattr(info, "pss", info.rss)
    return rss, pss


class PeakMemory:
    """Samples the memory of a process tree (``root``, default this process; and a local cluster's) in a
    background thread.

    ``peak_pss_bytes`` (what the group really holds) and ``peak_rss_bytes`` (sum of RSS, an upper bound)
    are the maxima seen.
    """

    def __init__(self, tag_prefix: str | None = None, interval_s: float = 0.5, root: int | None = None) -> None:
        import threading

        self.root = root
        self.tag_prefix = tag_prefix
        self.interval_s = interval_s
        self.peak_rss_bytes = 0
        self.peak_pss_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            rss, pss = memory_bytes(tree_processes(self.root, tag_prefix=self.tag_prefix))
            self.peak_rss_bytes = max(self.peak_rss_bytes, rss)
            self.peak_pss_bytes = max(self.peak_pss_bytes, pss)
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
