"""Why one emulated node's ``ray start`` failed, read from its own logs, and what to do about it.

Ray 2.60.0's fixed start-time limits (15 s for each agent's port file, 30 s for the raylet to register; no flag or
``RAY_*`` variable sets them) are missed on a busy 2-core machine, so :mod:`raytpu.local.slice.startup` starts hosts a
few at a time, reads each raylet's log as it runs, and restarts only what a restart can fix: a lost port race on new
ports, a slow agent alone. Source: docs/FACTS.md#local-start-limits. Standard library only."""

from __future__ import annotations

import dataclasses
import glob
import os
from dataclasses import dataclass
from enum import Enum

AGENT_PORT_WAIT_S = 15
"""Ray 2.60.0's fixed wait of a raylet for its agents' port files (see the module docstring)."""
REGISTER_WAIT_S = 30
"""Ray 2.60.0's fixed wait of ``ray start`` for its raylet to register (see the module docstring)."""


class Cause(Enum):
    """What stopped a node from starting; each value is its one-word name in messages."""

    PORT = "port taken"
    AGENT = "agent too slow"
    REGISTER = "raylet not registered"
    GCS = "GCS unreachable"
    MEMORY = "out of memory"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class StartFailure:
    """A classified failure: its :class:`Cause`, the log line showing it (``detail``), what to do (``remedy``), and
    ``retry``: ``new ports`` (a port race), ``alone`` (nothing else starting), ``""`` (a retry would fail the same)."""

    cause: Cause
    detail: str
    remedy: str
    retry: str = ""

    def message(self, what: str) -> str:
        """One line: ``<what>: <cause>: <detail>; <remedy>``."""
        return f"{what}: {self.cause.value}: {self.detail}; {self.remedy}"


_PORT_SIGNS = ("address already in use", "already occupied", "failed to start the grpc server",
               "used by other components", "port number")
"""Ray 2.60.0's words for a port another process holds (dashboard, GCS, OS). Source:
docs/FACTS.md#local-start-limits."""
_MEMORY_SIGNS = ("cannot allocate memory", "memoryerror", "[errno 12]", "no space left on device", "std::bad_alloc")
_GCS_SIGNS = ("failed to connect to gcs", "timed out while waiting for gcs to become available",
              "unable to connect to gcs")
_AGENT_SIGN = "timed out waiting for file"
_REGISTER_SIGN = "timed out during startup"
_ALONE = "the machine is busy; starting it again with no other node starting"


def raylet_logs(node_temp_dir: str) -> list[str]:
    """The raylet log files of the node whose ``--temp-dir`` is ``node_temp_dir`` (one node per temp dir)."""
    return sorted(glob.glob(os.path.join(node_temp_dir, "session_*", "logs", "raylet*.out")))


def _read(path: str, limit: int = 200_000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(os.path.getsize(path) - limit, 0))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _line_with(text: str, sign: str) -> str:
    for line in text.splitlines():
        if sign in line.lower():
            return line.strip()[-240:]
    return ""


def _raylet_text(node_temp_dir: str) -> str:
    return "\n".join(_read(p) for p in raylet_logs(node_temp_dir))


def _agent_abort_in(raylet: str) -> StartFailure | None:
    line = _line_with(raylet, _AGENT_SIGN)
    if not line:
        return None
    agent = line.rsplit("/", 1)[-1].split("_port_")[0] or "an agent"
    return StartFailure(Cause.AGENT,
                        f"its {agent} did not start within Ray's fixed {AGENT_PORT_WAIT_S} s (the raylet aborted)",
                        _ALONE, retry="alone")


def agent_abort(node_temp_dir: str) -> StartFailure | None:
    """The raylet's abort for an agent that missed Ray's fixed port-file wait, as soon as it is in the log."""
    return _agent_abort_in(_raylet_text(node_temp_dir))


def diagnose(start_log: str, node_temp_dir: str) -> StartFailure:
    """Why a ``ray start`` that exited non-zero failed, from its own output and its raylet's log."""
    raylet = _raylet_text(node_temp_dir)
    aborted = _agent_abort_in(raylet)
    if aborted is not None:
        return aborted
    for signs, failure in (
        (_PORT_SIGNS, StartFailure(Cause.PORT, "", "another process took a port it was given; starting it again "
                                                   "on new ports", retry="new ports")),
        (_MEMORY_SIGNS, StartFailure(Cause.MEMORY, "", "free memory (the emulated slice needs about 0.5 GiB per "
                                                       "host) or emulate a smaller topology")),
        (_GCS_SIGNS, StartFailure(Cause.GCS, "", "the head is down or overloaded: `raytpu local down`, then "
                                                 "`raytpu local up`")),
    ):
        line = next(filter(None, (_line_with(t, s) for s in signs for t in (start_log, raylet))), "")
        if line:
            return dataclasses.replace(failure, detail=line)
    if _REGISTER_SIGN in start_log.lower():
        return StartFailure(Cause.REGISTER, f"its raylet did not register with the GCS within Ray's fixed "
                                            f"{REGISTER_WAIT_S} s", _ALONE, retry="alone")
    last = next((ln.strip() for ln in reversed(start_log.splitlines()) if ln.strip()), "no output")
    return StartFailure(Cause.UNKNOWN, last[-240:], "see the log named above")
