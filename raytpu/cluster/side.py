"""The deployed stack as a :class:`raytpu.runs.side.Side`: ``raytpu submit|runs|doctor --stack NAME``. A thin adapter
over :mod:`raytpu.cluster.submission`, :mod:`raytpu.cluster.runs` and :mod:`raytpu.cluster.doctor`; one connection
to the stack's cluster, made on first use, serves every call until :meth:`ClusterSide.close`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raytpu.cluster import submission
from raytpu.cluster.outputs import DEFAULT_OUTPUTS, StackOutputs
from raytpu.core.common import errors
from raytpu.runs.side import FOLLOW_S

if TYPE_CHECKING:
    from raytpu.cluster.kube.kube_client import KubeClient
    from raytpu.core.common.checkup import Check
    from raytpu.core.specs.spec import WorkloadSpec
    from raytpu.runs.following import Sink, Streams
    from raytpu.runs.run_list import Run
    from raytpu.runs.side import Preview, SubmitRequest


@dataclass(frozen=True)
class _Built:
    """A submission's run and object, the image record read, and how to build the run of another id (two
    submissions in one second: :func:`raytpu.cluster.submission.submit_new`)."""

    run: submission.StackRun
    manifest: dict[str, Any]
    refs: Mapping[str, str]
    rebuilt: Callable[[str], tuple[submission.StackRun, dict[str, Any]]]


class ClusterSide:
    """The stack ``stack`` whose outputs are in the file ``outputs`` (None: the default file); ``team`` narrows the
    runs to that team's namespace (``raytpu-<team>``), whose Role a member holds."""

    name = "cluster"
    example_config = False
    always_followed = False

    def __init__(self, stack: str | None, outputs: str | None = None, team: str | None = None,
                 valid: str = "the cluster stack's id, <cluster name>-cluster") -> None:
        self._stack, self.outputs_path, self.team, self._valid = stack, outputs or DEFAULT_OUTPUTS, team, valid
        self._client: KubeClient | None = None

    @property
    def stack(self) -> str:
        """The stack's id; InvalidInput (exit 2) when none was given, said when the stack is first needed."""
        if not self._stack:
            raise errors.missing("--stack", "(or --local)", self._valid)
        return self._stack

    def preview(self, work: WorkloadSpec, request: SubmitRequest) -> Preview:
        """What :meth:`submit` would apply (``--dry-run``); nothing is uploaded or applied."""
        built = self._built(work, request, preview=True)
        return submission.preview(built.run, built.manifest, built.refs)

    def submit(self, work: WorkloadSpec, request: SubmitRequest, streams: Streams) -> int:
        """Builds the workload's KubeRay object from the spec and the stack outputs, applies it and with ``wait``
        follows it."""
        from raytpu.cluster import google_api

        built = self._built(work, request, preview=False)
        if request.upload_core:
            google_api.upload_core(google_api.upload_target(request.py_modules, built.run.outputs.bucket))
        return submission.submit_new(built.run, built.manifest, None if request.run_id else built.rebuilt,
                                     wait=request.wait, timeout_s=request.timeout_s or FOLLOW_S, streams=streams)

    def _built(self, work: WorkloadSpec, request: SubmitRequest, preview: bool) -> _Built:
        from raytpu.images.record import load_refs

        spec = request.spec
        outputs = StackOutputs.read(self.outputs_path, self.stack, spec, request.config)
        # the stack's own registry only; a preview (--dry-run) shows an unbuilt image as a placeholder, marked
        refs = load_refs(request.config, outputs.registry or None)

        def made(run_id: str | None, replace: bool = False) -> tuple[submission.StackRun, dict[str, Any]]:
            run = submission.StackRun.of(spec, work, outputs, self.stack, run_id, request.code)
            run = dataclasses.replace(run, replace=replace)
            manifest = run.manifest(refs, request.py_modules, preview=preview)
            if request.overridden:  # what `raytpu runs` shows of this run (an annotation: labels hold no JSON)
                from raytpu.config import overrides

                overrides.annotate(manifest, request.overridden)
            return run, manifest

        run, manifest = made(request.run_id, request.replace)
        return _Built(run, manifest, refs, made)

    def serve(self, work: WorkloadSpec, request: SubmitRequest, streams: Streams) -> int:
        """A RayService applied and waited for until it serves (its in-cluster endpoint streamed)."""
        if work.kind.is_job:
            raise errors.invalid_value("WORKLOAD", work.name, f"is a {work.kind.name} workload (a RayJob)",
                                       "a serving workload")
        return self.submit(work, dataclasses.replace(request, wait=True), streams)

    def _connected(self) -> KubeClient:
        if self._client is None:
            from raytpu.cluster import gke

            outputs = StackOutputs.read(self.outputs_path, self.stack)
            if self.team is not None:  # the team's namespace: a member whose Role is that namespace's reads only there
                from raytpu.core.specs.cluster.teams import NAMESPACE_PREFIX

                outputs = dataclasses.replace(outputs, namespace=f"{NAMESPACE_PREFIX}{self.team}")
            self._client = gke.connect(outputs)
        return self._client

    def list_runs(self) -> list[Run]:
        from raytpu.cluster import runs

        return runs.list_runs(self._connected())

    def usage(self) -> list[str]:
        from raytpu.cluster import runs

        return runs.queue_usage(self._connected()) if self.team is not None else []

    def logs(self, run: Run, *, rank: int | None, follow: bool, timeout_s: float, sink: Sink) -> None:
        from raytpu.cluster import runs

        if rank is not None:
            runs.rank_log(self._connected(), run, rank)
        else:
            runs.driver_log(self._connected(), run, follow=follow, timeout_s=timeout_s, sink=sink)

    def cancel(self, run: Run, *, timeout_s: float, progress: Sink) -> None:
        from raytpu.cluster import runs

        runs.cancel(self._connected(), run, timeout_s=timeout_s, progress=progress)

    def doctor(self, config: str | None) -> tuple[list[Check], dict[str, str]]:
        """:func:`raytpu.cluster.doctor.diagnose` and the queues' rows, against ``config`` (default:
        ``raytpu.yaml``)."""
        from raytpu import config as config_mod
        from raytpu.cluster import doctor, doctor_kueue, gke
        from raytpu.images.record import load_refs

        path = config_mod.choose(config)
        spec = config_mod.load(path)
        outputs = StackOutputs.read(self.outputs_path, self.stack, spec, path)
        refs = load_refs(path, outputs.registry or None)
        with gke.connect(outputs) as client:
            return doctor.diagnose(client, spec, outputs, refs) + doctor_kueue.rows(client, spec), {"stack": self.stack}

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
