"""The emulated slice as a :class:`raytpu.runs.side.Side`: ``raytpu submit|runs|doctor --local`` and ``raytpu local
serve``. A thin adapter over :mod:`raytpu.local.running.submission`, :mod:`raytpu.local.running.deploy` (the kit's LLM
app), :mod:`raytpu.local.running.team_app` (a team's ``serve_app``), :mod:`raytpu.local.running.runs` and
:mod:`raytpu.local.running.doctor`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from raytpu.core.common import errors
from raytpu.local.slice.state import LocalCluster, run_dir
from raytpu.runs.side import FOLLOW_S

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient

    from raytpu.core.common.checkup import Check
    from raytpu.core.specs.spec import WorkloadSpec
    from raytpu.runs.following import Sink, Streams
    from raytpu.runs.run_list import Run
    from raytpu.runs.side import Preview, SubmitRequest
    from raytpu.teamcode.prepared import TeamCode

SERVE_TIMEOUT_S = 420.0
"""How long a serving workload's deploy may take by default (``raytpu local serve --timeout-s``)."""
SERVE_CACHES = ("TMPDIR", "HOME", "XDG_CACHE_HOME")
"""Where the LLM app's processes write: the tiny model under ~/.cache (tiny_llm), vLLM's and Hugging Face's caches
under XDG_CACHE_HOME (else ~/.cache); a traceback there would be the only word, so they are checked first."""


def _no_check(*_names: str) -> None:
    return None


class LocalSide:
    """The local cluster recorded in ``directory`` (default: ``$RAYTPU_LOCAL_DIR`` or ``.raytpu/local``).
    ``check_environment`` refuses unusable folder variables (exit 2) before a process that writes there starts."""

    name = "local"
    example_config = True
    always_followed = True

    def __init__(self, directory: str | Path | None = None, check_environment: Callable[..., None] = _no_check,
                 cluster: LocalCluster | None = None) -> None:
        self.directory, self.check_environment = directory, check_environment
        self._client: JobSubmissionClient | None = None
        self._cluster = cluster

    def cluster(self) -> LocalCluster:
        """The recorded cluster; RuntimeFailure (exit 1) naming ``raytpu local up`` when there is none."""
        if self._cluster is None:
            found = LocalCluster.load(run_dir(self.directory))
            if found is None:
                raise errors.RuntimeFailure(f"local: no local cluster recorded in {run_dir(self.directory)}",
                                            "start one with `raytpu local up`")
            self._cluster = found
        return self._cluster

    def preview(self, work: WorkloadSpec, request: SubmitRequest) -> Preview:
        raise errors.InvalidInput("--dry-run", "previews a stack's KubeRay object; the emulated slice applies none",
                                  "--dry-run with --stack NAME")

    def submit(self, work: WorkloadSpec, request: SubmitRequest, streams: Streams) -> int:
        """A job workload through Ray's Job Submission API, followed
        (:func:`raytpu.local.running.submission.submit_local`); a serving workload deployed as ``raytpu local serve
        --workload NAME`` deploys it (:meth:`serve`)."""
        if request.api_key_file is not None and work.kind.is_job:
            raise errors.InvalidInput("--api-key-file", f"is for a serving workload; {work.name} is a "
                                      f"{work.kind.name} workload", "no --api-key-file for it, or a serving workload")
        if not work.kind.is_job:
            if request.report is not None:
                raise errors.forbidden("--report", request.report, f"for serving workload {work.name} with --local (it "
                                       "serves until `raytpu local down`: no run ends to report)",
                                       "no --report for it, or a job workload")
            return self.serve(work, request, streams)
        from raytpu.local.running.submission import submit_local

        return submit_local(work, directory=self.directory, run_id=request.run_id,
                            timeout_s=request.timeout_s or FOLLOW_S,
                            streams=streams, cpu_model=request.cpu_model, overwrite=request.overwrite,
                            code=request.code, overridden=request.overridden)

    def serve(self, work: WorkloadSpec, request: SubmitRequest, streams: Streams) -> int:
        """Serving workload ``work`` moved onto the emulated slice (which must be its slice) and deployed
        (:meth:`deploy`)."""
        from raytpu.local.slice.from_config import serving_on_slice

        if work.kind.is_job:
            raise errors.invalid_value("WORKLOAD", work.name, f"is a {work.kind.name} workload (a RayJob): it runs "
                                       "through the Job Submission API", f"`raytpu submit {work.name} --local`")
        for flag, given in (("--cpu-model", request.cpu_model is not None), ("--overwrite", request.overwrite)):
            if given:
                raise errors.InvalidInput(flag, f"is for a batch workload; {work.name} is a {work.kind.name} "
                                          "workload", f"no {flag} for it, or a batch workload")
        cluster = self.cluster()
        self.deploy(serving_on_slice(cluster, work), timeout_s=request.timeout_s or SERVE_TIMEOUT_S,
                    api_key_file=request.api_key_file, code=request.code, streams=streams)
        return 0

    def default_serving(self) -> WorkloadSpec:
        """The kit's own serving workload on the emulated slice (``raytpu local serve`` with no config)."""
        return self.cluster().workload("serve")

    def deploy(self, work: WorkloadSpec, *, timeout_s: float, api_key_file: str | None, code: TeamCode | None,
               streams: Streams) -> dict[str, str]:
        """Deploys ``work`` (already on the emulated slice) and leaves it serving until ``raytpu local down``: a
        team's ``serve_app`` in the kit's ``.venv`` (no vLLM; its ``code`` as read once), else the kit's LLM app as
        its CPU twin (vLLM's CPU build). ``endpoint:`` (and ``model:``) to ``streams.out``, and returned."""
        from raytpu.local.slice.connection import check_head

        cluster = self.cluster()

        def progress(line: str) -> None:
            streams.err(f"raytpu local: {line}")

        if work.serve_app is not None:
            from raytpu.local.running.team_app import deploy_team_app

            assert code is not None, f"{work.name}: a serve_app's code is read once by the command (TeamCode)"
            check_head(cluster)
            said = {"endpoint": deploy_team_app(cluster, work, code, timeout_s, api_key_file, progress)}
        else:
            from raytpu.local.running.deploy import deploy_serve, require_vllm

            require_vllm()
            self.check_environment(*SERVE_CACHES)
            check_head(cluster)  # the head, once the arguments and this environment are known good
            url, model = deploy_serve(cluster, work, timeout_s, api_key_file, progress=progress, echo=streams.err)
            said = {"endpoint": url, "model": model}
        for key, value in said.items():
            streams.out(f"{key}: {value}")
        progress("serving until `raytpu local down`")
        return said

    def _jobs(self) -> JobSubmissionClient:
        if self._client is None:
            from raytpu.local.running import runs

            self._client = runs.jobs_client(self.cluster())
        return self._client

    def list_runs(self) -> list[Run]:
        from raytpu.local.running import runs

        return runs.list_runs(self._jobs())

    def usage(self) -> list[str]:
        return []  # no queues on the emulated slice: every run is listed

    def logs(self, run: Run, *, rank: int | None, follow: bool, timeout_s: float, sink: Sink) -> None:
        from raytpu.local.running import runs

        if rank is not None:
            runs.rank_log(self.cluster(), self._jobs(), run, rank, follow=follow, timeout_s=timeout_s, sink=sink)
        else:
            runs.driver_log(self._jobs(), run, follow=follow, timeout_s=timeout_s, sink=sink)

    def cancel(self, run: Run, *, timeout_s: float, progress: Sink) -> None:
        from raytpu.local.running import runs

        runs.cancel(self.cluster(), self._jobs(), run, timeout_s=timeout_s, progress=progress)

    def doctor(self, config: str | None) -> tuple[list[Check], dict[str, str]]:
        """:func:`raytpu.local.running.doctor.diagnose` of the recorded cluster, its head checked first (``config``
        unread)."""
        from raytpu.local.running import doctor
        from raytpu.local.slice.connection import check_head

        where = run_dir(self.directory)
        found = LocalCluster.load(where)
        if found is None:  # one line, as `raytpu local status` says it
            raise errors.RuntimeFailure(f"local: no local cluster recorded in {where}; "
                                        "start one with `raytpu local up`")
        check_head(found)
        return doctor.diagnose(found), {"dir": str(where)}

    def close(self) -> None:
        self._client = None
