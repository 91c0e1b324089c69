"""The run directory and its state file, so ``raytpu local up|status|down`` work across invocations: a run dir
(``$RAYTPU_LOCAL_DIR``, default ``.raytpu/local``) holds ``cluster.json`` (:class:`LocalCluster`), the nodes' logs and
the cluster's Ray auth token. Standard library at import (plus the kit's spec layer)."""

from __future__ import annotations

import errno
import json
import os
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from raytpu.core.common.errors import InvalidInput, RuntimeFailure, excerpt, folder_valid, invalid_value
from raytpu.core.common.errors import (
    full_disk as full_disk,  # re-exported: raytpu.local.slice.startup imports it from here
)
from raytpu.core.common.names import AUTH_MODE
from raytpu.core.specs.kinds import kind
from raytpu.core.specs.spec import SliceSpec, WorkloadSpec
from raytpu.core.tpu.catalog import generation
from raytpu.core.tpu.plan import SlicePlan
from raytpu.local.slice.emulation import ENV_EMULATED, WEBHOOK_ENV

STATE_FILE = "cluster.json"
ENV_RUN_DIR = "RAYTPU_LOCAL_DIR"
ENV_CLUSTER = "RAYTPU_LOCAL_CLUSTER"
"""Set to the cluster's private temp dir in every process of a local cluster (nodes, workers, drivers): how
:func:`raytpu.local.slice.procs.stop` and the tests find them all, reparented or not."""

DEFAULT_RUN_DIR = Path(".raytpu") / "local"
TMP_PREFIX = "/tmp/raytpu-"
ENV_TMP_PREFIX = "RAYTPU_LOCAL_TMP_PREFIX"

Progress = Callable[[str], None]
"""Where a long operation reports its milestones, one line each (the CLI writes them to stderr)."""


@dataclass
class NodeProc:
    """One node's ``ray start`` (a session leader: ``pid`` is also the group id its daemons keep) and what it emulates:
    ``role`` (``head`` or ``host``), ``log``, ``slice_name`` (``TPU_NAME``), ``worker_id`` (``TPU_WORKER_ID``; the head
    has "" and -1), ``killed`` (taken down on purpose by :func:`raytpu.local.slice.procs.kill_host`), ``temp`` (its
    ``--temp-dir``)."""

    role: str
    pid: int
    log: str
    slice_name: str = ""
    worker_id: int = -1
    killed: bool = False
    temp: str = ""


@dataclass
class LocalCluster:
    """The recorded state of one local emulated cluster (``<run dir>/cluster.json``): ``temp_dir`` is Ray's private temp
    dir (short, under /tmp, for unix socket paths), ``address`` the GCS ``host:port``, ``plan`` every slice's SlicePlan
    as JSON, ``slices`` the ``TPU_NAME`` of each, ``nodes`` every process (head first), ``started_s`` from the first
    ``ray start`` until all registered, ``dashboard`` the Job Submission API's URL, ``auth_token_path`` the token file,
    ``started_by`` the command that started it (for a refusal's message), ``log_monitor`` whether its nodes run Ray's
    log monitor (what a ``log_to_driver=True`` driver, a team's, reads its workers' output through)."""

    run_dir: str
    temp_dir: str
    address: str
    plan: dict[str, Any]
    slices: list[str]
    nodes: list[NodeProc] = field(default_factory=list)
    started_s: float = 0.0
    dashboard: str = ""
    auth_token_path: str = ""
    started_by: str = ""
    log_monitor: bool = True

    def auth_env(self) -> dict[str, str]:
        """Ray's token authentication, as on GKE (``raytpu.core.common.names.AUTH_MODE``): every node, worker and driver
        of the cluster reads the token from :attr:`auth_token_path` (``RAY_AUTH_TOKEN_PATH``)."""
        return {"RAY_AUTH_MODE": AUTH_MODE, "RAY_AUTH_TOKEN_PATH": self.auth_token_path}

    def ray_cli_env(self) -> dict[str, str]:
        """What Ray's own CLI needs to reach this cluster (``ray status``, ``ray job submit``): its addresses and
        token. Source: Ray 2.60 ``ray.dashboard.utils.get_address_for_submission_client`` (``RAY_API_SERVER_ADDRESS``,
        else ``RAY_ADDRESS``), ``authentication_token_setup._get_default_token_path`` (else ``~/.ray/auth_token``)."""
        return {"RAY_ADDRESS": self.address, "RAY_API_SERVER_ADDRESS": self.dashboard, **self.auth_env()}

    @property
    def slice_plan(self) -> SlicePlan:
        """The SlicePlan every slice of this cluster follows."""
        return SlicePlan.from_json(self.plan)

    @property
    def slice_spec(self) -> SliceSpec:
        """The emulated slices as one SliceSpec (``count`` = slices here), what workloads are given."""
        plan = self.slice_plan
        return SliceSpec(name="local", plan=plan, zone=generation(plan.generation).zones[0], count=len(self.slices))

    def workload(self, kind_name: str, slices: int | None = None) -> WorkloadSpec:
        """The spec a workload of ``kind_name`` run on these slices receives (``RAYTPU_WORKLOAD``), with its
        ``workloads[].slices`` (a multi-slice training run spans that many; InvalidInput past the slices here)."""
        return WorkloadSpec(name=f"local-{kind_name}", kind=kind(kind_name), slice=self.slice_spec, slices=slices)

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
        try:
            tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
            tmp.replace(path)
        except BaseException:  # a full file system: no half-written state is left (issue 48)
            tmp.unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, run_dir: str | Path) -> LocalCluster | None:
        """The cluster recorded in ``run_dir``, or None when there is none; InvalidInput (exit 2, naming the file)
        when the state file is not one ``raytpu local up`` wrote."""
        path = Path(run_dir) / STATE_FILE
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            data["nodes"] = [NodeProc(**n) for n in data.get("nodes", [])]
            cluster = cls(**data)
            if not all(isinstance(v, str) for v in (cluster.run_dir, cluster.temp_dir, cluster.address)):
                raise TypeError("run_dir, temp_dir and address are not strings")
            return cluster
        except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError) as exc:
            raise InvalidInput(str(path), f"is not the state `raytpu local up` writes ({type(exc).__name__}: "
                               f"{str(exc)[:120]})", "the file as `raytpu local up` wrote it; move it away (stop "
                               "its Ray processes by hand) and start again") from exc

    def hosts_recorded_wall(self) -> float:
        """When the state file was last written (wall clock): by ``raytpu local up`` once every host had started."""
        return (Path(self.run_dir) / STATE_FILE).stat().st_mtime

    def driver_env(self) -> dict[str, str]:
        """Environment for a driver process (``python -m raytpu.workloads.smoke``) on this cluster: its own addresses,
        the State API's too (:meth:`ray_cli_env`), never another cluster's this process spoke to before."""
        env = {k: v for k, v in os.environ.items() if k not in WEBHOOK_ENV}
        env.update({ENV_EMULATED: "1", "RAY_USAGE_STATS_ENABLED": "0", ENV_CLUSTER: self.temp_dir,
                    **self.ray_cli_env()})
        return env


def run_dir(explicit: str | Path | None = None) -> Path:
    """The run directory: ``explicit``, else ``$RAYTPU_LOCAL_DIR``, else ``./.raytpu/local``."""
    chosen = explicit or os.environ.get(ENV_RUN_DIR) or DEFAULT_RUN_DIR
    path = Path(chosen).resolve()
    if path.exists() and not path.is_dir():
        raise invalid_value(ENV_RUN_DIR if not explicit and os.environ.get(ENV_RUN_DIR) else "--dir",
                            str(chosen), "is not a folder", "the run directory of a local cluster (a folder)")
    return path


def temp_prefix() -> str:
    """Prefix of a new cluster's Ray temp dir: ``$RAYTPU_LOCAL_TMP_PREFIX`` (tests), else ``/tmp/raytpu-``; always under
    ``/tmp/raytpu-`` (short socket paths; :func:`raytpu.local.slice.procs.stop` sweeps only those). RuntimeFailure (exit
    1) when ``/tmp`` takes no byte (full, read-only): Ray's own start would fail there after a minute, read as an
    unreachable GCS."""
    prefix = os.environ.get(ENV_TMP_PREFIX, TMP_PREFIX)
    if not prefix.startswith(TMP_PREFIX) or "/" in prefix[len(TMP_PREFIX):]:
        raise invalid_value(ENV_TMP_PREFIX, prefix, f"must start with {TMP_PREFIX} and name no subdirectory",
                            f"{TMP_PREFIX}<letters>-")
    probe = f"{prefix}probe-{secrets.token_hex(4)}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"\0")  # a full file system takes the file, not its first byte
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        folder = os.path.dirname(TMP_PREFIX)
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        fix = f"free space in {folder}" if full else f"a {folder} this user can write"
        raise RuntimeFailure(f"local: cannot write Ray's temp folder {folder} ({exc.strerror or exc})",
                             f"{fix} (each node keeps its Ray session, logs and sockets in {TMP_PREFIX}*), then "
                             "start again") from exc
    return prefix


def auth_token_file(where: Path) -> Path:
    """The cluster's Ray auth token file: this process's own token when it has one (``RAY_AUTH_TOKEN`` or
    ``RAY_AUTH_TOKEN_PATH``; Ray caches one token per process, so every cluster one process drives shares it),
    else a new random token in ``<run dir>/auth_token`` (mode 0600)."""
    given = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if given and Path(given).is_file():
        return Path(given).resolve()
    path = (where / "auth_token").resolve()  # absolute: every node runs in the run dir, the driver may not
    tmp = path.with_name(f".auth_token.{os.getpid()}")
    try:
        tmp.touch(mode=0o600)
        tmp.write_text(os.environ.get("RAY_AUTH_TOKEN") or secrets.token_hex(32))
        tmp.replace(path)  # whole or not at all: a full file system leaves no empty token (issue 48)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def unwritable(where: Path, exc: OSError, command: str = "raytpu local up") -> RuntimeFailure:
    """A run folder ``command`` cannot write into (a full file system, ENOSPC; over quota; a read-only one): one error
    line (exit 1) naming the folder and what to do, never a traceback."""
    return RuntimeFailure(f"local: cannot write the run folder {excerpt(str(where), 120, tail=True)} "
                          f"({exc.strerror or exc})", f"{folder_valid(exc)}, then `{command}` again; nothing of "
                          "this command is left there")
