"""One interface for the two places a run goes: a deployed stack (:class:`raytpu.cluster.side.ClusterSide`) or the
emulated slice (:class:`raytpu.local.running.side.LocalSide`). A command chooses its side once (``--stack`` or
``--local``) and then speaks this vocabulary only; each side wraps its own steps, which return what the command prints
and stream their lines to the sinks it passes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from raytpu.core.common.checkup import Check
    from raytpu.core.specs.spec import ClusterSpec, WorkloadSpec
    from raytpu.runs.following import Sink, Streams
    from raytpu.runs.run_list import Run
    from raytpu.teamcode.prepared import TeamCode


FOLLOW_S = 3600.0
"""How long a followed run (``submit --wait``, ``submit --local``) is followed when no ``--timeout-s`` is given."""


@dataclass(frozen=True)
class SubmitRequest:
    """What ``raytpu submit`` asks of a side, its flags already checked. ``code`` is the workload's team code as the
    command read it once (its config path, ``workloads[2]``, is ``code.field``); the stack-only and local-only flags
    keep their defaults on the other side. ``timeout_s`` None: the side's default for the step (:data:`FOLLOW_S` to
    follow a run)."""

    spec: ClusterSpec
    config: str
    code: TeamCode
    run_id: str | None = None
    wait: bool = False
    timeout_s: float | None = None
    report: str | None = None
    overridden: dict[str, Any] | None = None
    py_modules: str | None = None
    upload_core: bool = False
    replace: bool = False
    cpu_model: str | None = None
    overwrite: bool = False
    api_key_file: str | None = None


@dataclass(frozen=True)
class Preview:
    """What ``--dry-run`` shows: the header naming unbuilt images, the object behind its NetworkPolicy, and where a
    team's code zip would go (``note``, for stderr)."""

    header: str
    manifests: list[dict[str, Any]]
    note: str | None


class Side(Protocol):
    """Where runs go and are read back: submit, serve, list, logs, cancel, doctor."""

    name: str
    """``cluster`` or ``local``: what ``doctor``'s JSON calls the side."""
    example_config: bool
    """Whether the kit's example config stands in when there is no ``raytpu.yaml`` (the emulated slice: it needs no
    cloud project)."""
    always_followed: bool
    """Whether a submitted run is followed to its end without ``--wait`` (the emulated slice's always is)."""

    def preview(self, work: WorkloadSpec, request: SubmitRequest) -> Preview:
        """What :meth:`submit` would apply, applying nothing (``--dry-run``)."""
        ...

    def submit(self, work: WorkloadSpec, request: SubmitRequest, streams: Streams) -> int:
        """Runs a job workload, or deploys a serving one; its lines to ``streams``; the exit code."""
        ...

    def serve(self, work: WorkloadSpec, request: SubmitRequest, streams: Streams) -> int:
        """Deploys serving workload ``work`` and leaves it serving: ``endpoint:`` (and, for the kit's LLM app,
        ``model:``) to ``streams.out`` once it answers; the exit code."""
        ...

    def list_runs(self) -> list[Run]:
        """The kit's runs on this side, newest state first as each side lists them."""
        ...

    def usage(self) -> list[str]:
        """Lines on the chips in use that the run listing ends with (a team's queue); none where there is no queue."""
        ...

    def logs(self, run: Run, *, rank: int | None, follow: bool, timeout_s: float, sink: Sink) -> None:
        """The run's driver output, or a training rank's (``rank``), to ``sink``."""
        ...

    def cancel(self, run: Run, *, timeout_s: float, progress: Sink) -> None:
        """Stops the run and frees its slice."""
        ...

    def doctor(self, config: str | None) -> tuple[list[Check], dict[str, str]]:
        """The checks of this side against what the kit expects, and where they ran (``{"stack": ...}``)."""
        ...

    def close(self) -> None:
        """Ends what the side held open for its calls (the cluster's connection); a command calls it at its end."""
        ...
