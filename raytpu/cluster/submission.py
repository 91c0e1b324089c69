"""One workload of the config on a deployed stack: its KubeRay object, the checks, the server-side apply and
(``--wait``) following it. A RayJob gets a run suffix (``train-t5x2kq``: a new run with its own checkpoints); a
RayService keeps its name (applying again updates it). ``raytpu submit`` is the argparse adapter."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from raytpu import images
from raytpu.cluster import gke, occupancy
from raytpu.cluster.kube.kube_errors import KubeError
from raytpu.core.common import errors, names, report, timeline
from raytpu.core.manifests import kuberay, kueue, serving
from raytpu.core.specs.runtime import run_env
from raytpu.core.specs.serving import vllm_rules
from raytpu.runs.following import FollowedRun, Sink, Streams
from raytpu.runs.side import Preview
from raytpu.teamcode.bundle import Bundle

if TYPE_CHECKING:
    from raytpu.cluster.kube.kube_client import KubeClient
    from raytpu.cluster.outputs import StackOutputs
    from raytpu.core.specs.kinds import WorkloadKind
    from raytpu.core.specs.spec import ClusterSpec, WorkloadSpec
    from raytpu.teamcode.prepared import TeamCode


@dataclass(frozen=True)
class StackRun:
    """A workload bound for a deployed stack under its run's name (RayJob: ``<workload>-<run id>``; RayService: the
    workload's name)."""

    spec: ClusterSpec
    work: WorkloadSpec
    outputs: StackOutputs
    stack: str
    name: str
    team_code: TeamCode
    """The workload's code as read once by the command (its zip, its lock, its config path)."""
    replace: bool = False
    """``submit --replace``: a RayService whose Ray cluster spec this submit changes is deleted and re-created."""

    @classmethod
    def of(cls, spec: ClusterSpec, work: WorkloadSpec, outputs: StackOutputs, stack: str,
           run_id: str | None, code: TeamCode) -> StackRun:
        """Every RayJob submission is a new run: its own name, and (train) its own checkpoint directory; ``code`` is
        the workload's team code, read once (:func:`raytpu.images.team.prepare`)."""
        name = f"{work.name}-{run_id or names.run_id()}" if work.kind.is_job else work.name
        team = spec.team_of(work)
        if team is not None:  # the team's own namespace: its KSA (the same name), Secrets and queue
            outputs = dataclasses.replace(outputs, namespace=team.namespace)
        return cls(spec, work, outputs, stack, name, code)

    @property
    def code(self) -> Bundle | None:
        """The code folder's zip (None: no ``code``)."""
        return self.team_code.zip

    @property
    def team_image(self) -> str | None:
        """The image of the workload's requirements lock (None: no requirements)."""
        from raytpu.images import team

        return team.image_name(self.team_code)

    @property
    def code_uri(self) -> str | None:
        """Where the code zip lives in the bucket (``gs://<bucket>/code/<workload>-<sha256>.zip``)."""
        return names.code_zip_uri(self.outputs.bucket, self.code_name) if self.code_name else None

    @property
    def code_name(self) -> str | None:
        """The code zip's name under ``code/``: a team's under ``code/<team>/``, the only code its identity reads."""
        if self.code is None:
            return None
        return self.code.object_name if self.work.team is None else f"{self.work.team}/{self.code.object_name}"

    def manifest(self, refs: Mapping[str, str], py_modules: str | None, *, preview: bool = False) -> dict[str, Any]:
        """The workload's KubeRay object; a ``preview`` shows an image not built yet as a placeholder."""
        resolve = images.preview_resolver if preview else images.resolver
        manifest = kuberay.workload_manifest(self.spec, self.work,
                                             images=resolve(refs, stack=self.stack, team_image=self.team_image),
                                             service_account=self.outputs.service_account,
                                             bucket=self.outputs.bucket, namespace=self.outputs.namespace,
                                             py_modules=py_modules, name=self.name,
                                             args=self.work.kind.run_args(self.name, team=self.work.team),
                                             code_zip=self.code_name)
        team = self.spec.team_of(self.work)
        return manifest if team is None else kueue.queued(manifest, team, self.work)


def preview(run: StackRun, manifest: dict[str, Any], refs: Mapping[str, str]) -> Preview:
    """The ``--dry-run`` view of ``manifest``; nothing is uploaded or applied."""
    manifests = kuberay.with_network_policies([manifest], run.spec)
    note = None
    if run.code is not None:  # what ships, file by file: the team sees every name before the bucket does
        note = "\n".join([f"code: {run.code_uri} ({run.code.files} files; not uploaded: --dry-run)",
                          *run.code.listing()])
    missing = [n for n in [images.unbuilt(run.work, refs, run.team_image)] if n]
    return Preview(images.mark_preview(manifests, missing), manifests, note)


def apply(client: KubeClient, run: StackRun, manifest: dict[str, Any], say: Sink) -> None:
    """Checks the served CRD, a RayService's API key Secret, a RayJob's slice copies and free name, uploads a team's
    code zip if missing (``say``s where), then applies the object behind its NetworkPolicy. Raises before anything is
    applied."""
    client.check_schema(manifest, kuberay.MIN_KUBERAY_VERSION)
    changed = None
    if manifest["kind"] == "RayService":
        check_api_key_secret(client, run.spec.security.serve_api_key_secret, run.outputs.namespace)
        changed = service_drift(client.get("RayService", run.name), manifest)
        if changed is not None and not run.replace:
            raise errors.InvalidInput(
                "--replace", f"is not given, and this submit changes RayService {run.name}'s Ray cluster spec (at "
                f"{errors.excerpt(changed)}), which KubeRay v1.7.0 never applies to a running RayService with "
                "upgradeStrategy None: its pods would keep the old spec",
                "--replace (deletes the RayService, waits for its pods to go, then applies it anew: the endpoint is "
                "down until the new one serves); or submit without changing the cluster's fields")
    check_team_secrets(client, run.work, run.team_code.at("secrets"),
                       run.outputs.namespace)
    if run.work.kind.is_job and run.work.team is None:  # a team's run waits in its queue for the slice
        check_free(client, run.work, run.spec.cluster.autopilot)
    if run.work.kind.is_job and (existing := client.get("RayJob", run.name)) is not None:
        raise name_taken(run, gke.job_state(run.name, existing))
    if run.code is not None and run.code_uri is not None:  # the pods read it: in the bucket before the RayJob
        from raytpu.cluster import google_api

        uploaded = google_api.upload_code(run.code_uri, run.code.data)
        say(f"code: {run.code_uri} ({run.code.files} files, {'uploaded' if uploaded else 'already there'})")
    if changed is not None:
        from raytpu.cluster import runs
        from raytpu.runs.run_list import Run

        say(f"{run.name}: RayService's Ray cluster spec changed at {errors.excerpt(changed)}; --replace: deleting it "
            "first (KubeRay applies no cluster change to a running RayService with upgradeStrategy None)")
        runs.cancel(client, Run(run=run.name, object="RayService", kind="", workload=run.work.name,
                                slice=run.work.slice.name, state="", age_s=None, started_at=""),
                    timeout_s=REPLACE_TIMEOUT_S, progress=say)
    gke.apply_with_network_policy(client, manifest, run.spec)


REPLACE_TIMEOUT_S = 900.0
"""How long ``--replace`` waits for the old RayService and its pods to go (its slices' TPU pods drain first)."""


def service_drift(stored: Mapping[str, Any] | None, manifest: Mapping[str, Any]) -> str | None:
    """Where ``manifest``'s ``spec.rayClusterConfig`` differs from the live RayService ``stored`` (None: the same, or
    no such RayService). Keys only ``stored`` has are not a difference: the API server fills in the CRD's defaults
    (KubeRay v1.7.0's CRD declares ``default:`` values, e.g. a port's ``protocol: TCP``). KubeRay v1.7.0
    ``rayservice_controller.go`` ``shouldPrepareNewCluster``/``shouldUpdateCluster``: with upgradeStrategy None a
    changed cluster spec (other than worker groups added at the end) is neither rolled nor applied
    (docs/FACTS.md#ray-serve-changed-spec)."""
    if stored is None:
        return None
    return _first_difference((stored.get("spec") or {}).get("rayClusterConfig"),
                             manifest["spec"]["rayClusterConfig"], "spec.rayClusterConfig")


def _first_difference(have: Any, want: Any, path: str) -> str | None:
    if isinstance(want, Mapping):
        if not isinstance(have, Mapping):
            return path
        for key, value in want.items():
            found = _first_difference(have.get(key), value, f"{path}.{key}")
            if found is not None:
                return found
        return None
    if isinstance(want, list):
        if not isinstance(have, list) or len(have) != len(want):
            return path
        for i, (a, b) in enumerate(zip(have, want, strict=True)):
            found = _first_difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    return None if have == want else path


class NameTaken(errors.InvalidInput):
    """A RayJob of the run's name exists (nothing was applied): a default run id moves on to the next one."""


def name_taken(run: StackRun, state: gke.JobState) -> errors.InvalidInput:
    """Why a RayJob of the run's name blocks it (server-side apply would update that run in place) and the command
    that frees the name. KubeRay keeps a finished RayJob: ``shutdownAfterJobFinishes`` deletes only its Ray cluster,
    ``ttlSecondsAfterFinished`` later. Source: KubeRay v1.7.0 ``handleShutdownAfterJobFinishes``
    (docs/FACTS.md#preemption-restart-waits)."""
    cancel = f"raytpu runs cancel {run.name} --stack {run.stack}"
    run_id = run.name.removeprefix(f"{run.work.name}-")
    status = state.status  # KubeRay's message could pass the line's bound
    shown = errors.excerpt(run_id)
    if state.done:
        return NameTaken(
            "--run-id", f"{shown} names RayJob {run.name}, which exists and has finished ({status}); "
            "KubeRay keeps a finished RayJob (its Ray cluster goes, the object and its driver log stay)",
            f"`{cancel}` first (it deletes that RayJob and its driver log; checkpoints stay in the bucket), then "
            "this submit again: a train run of that name resumes from its last checkpoint; or another --run-id")
    return NameTaken(
        "--run-id", f"{shown} names RayJob {run.name}, which exists and has not finished ({status}); a new run "
        "never updates a running one", f"another --run-id; wait for it to end, or `{cancel}`")


def submit_new(run: StackRun, manifest: dict[str, Any],
               rebuilt: Callable[[str], tuple[StackRun, dict[str, Any]]] | None, **follow: Any) -> int:
    """:func:`submit`; a run with a default id (``rebuilt`` given: it makes the run of another id) whose RayJob
    exists (two submissions in one second) moves on to the next second's id
    (:func:`raytpu.core.common.names.next_run_id`), so every submission is a new run and a collision is never
    reported as the user's ``--run-id``."""
    for _ in range(names.MAX_RUN_ID_TRIES):
        try:
            return submit(run, manifest, **follow)
        except NameTaken:
            if rebuilt is None:
                raise
            run, manifest = rebuilt(names.next_run_id(run.name.removeprefix(f"{run.work.name}-")))
    raise errors.RuntimeFailure(f"submit: {names.MAX_RUN_ID_TRIES} run ids in a row up to {run.name} are taken by "
                                "RayJobs of this workload", "a --run-id of your own")


def submit(run: StackRun, manifest: dict[str, Any], *, wait: bool, timeout_s: float, streams: Streams) -> int:
    """Applies the object and, with ``wait``, follows it: a RayJob to its end, a RayService until it serves; the
    followed run goes to ``streams.ended``. Returns the exit code."""
    recorder = timeline.Recorder.for_command()
    with gke.connect(run.outputs) as client:
        apply(client, run, manifest, streams.err)
        kind, name = manifest["kind"], run.name
        recorder.mark("applied", f"{kind} {name} applied (server-side apply)")
        streams.err(f"applied {kind} {name} in namespace {run.outputs.namespace}")
        if run.work.kind.trains:
            streams.err(f"checkpoints: {names.checkpoint_uri(run.outputs.bucket, name, run.work.team)}")
        if not wait:
            streams.out(f"submitted {kind} {name}; `raytpu submit {run.work.name} --stack {run.stack} --wait` "
                        "follows a service, a job's progress is its RayJob status")
            return 0
        from raytpu.cluster.kube_timeline import KubePhases

        watcher = KubePhases(client, name, manifest, multi_host=not run.work.plan.single_host,
                             progress=streams.err).start()
        lines: list[str] = []  # the driver's log, as followed
        try:
            if kind == "RayService":
                return wait_service(client, name, run.work, run.outputs.namespace, timeout_s, streams,
                                    unreached=operator_hint(run.spec, name))
            return follow_job(client, name, run.work.kind, timeout_s, recorder, streams, lines,
                              prefix=run.team_code.field,
                              requirements=run.work.requirements is not None)
        finally:
            watcher.stop()
            watcher.apply_to(recorder)
            if kind == "RayService":
                recorder.unmeasured(service_unmeasured(run.spec.security.serve_endpoint))
            elif run.work.kind.runs_entrypoint:
                from raytpu.core.specs.runtime import user_code

                recorder.unmeasured(user_code.unmeasured_phases(run.work.on_every_host))
            streams.ended(FollowedRun(name, recorder.finish(), watcher.problem, tuple(lines)))


def service_unmeasured(serve_endpoint: str) -> dict[str, str]:
    """Why ``submit --wait`` leaves a RayService's Ray phases and first token ``not measured``: no program of ours
    stamps them, and this command sends no request to an endpoint it may not reach or hold the key for."""
    where = {
        "cluster-ip": "its endpoint is a ClusterIP Service, reachable from inside the cluster only "
                      "(security.serve_endpoint cluster-ip)",
        "internal-lb": "its endpoint is an internal load balancer, reachable from the VPC only, which this command "
                       "need not run in (security.serve_endpoint internal-lb)",
        "public-lb": "its public load balancer answers only with security.serve_api_key_secret's key, which this "
                     "command does not read (it checks that the Secret exists), and a request of ours would be "
                     "load on a live service",
    }.get(serve_endpoint, f"security.serve_endpoint {serve_endpoint}")
    inside = ("not measured by `submit --wait` for a RayService: its replicas reserve their slices inside the "
              "cluster, where no program of ours runs to stamp this phase")
    return {"ray_joined": inside, "reserved": inside, "trainer_started": inside,
            "compiled": "not measured for a RayService: vLLM compiles inside its engine, with its own XLA cache",
            "first_step": f"first token not measured by `submit --wait`: {where}; `raytpu demo --serve` measures "
                          "it on the emulated slice with the openai client"}


def check_free(client: KubeClient, work: WorkloadSpec, autopilot: bool) -> None:
    """A RayJob needs the copies it spans whole (``google.com/tpu`` chips are never shared: with fewer copies free of
    other TPU pods its pods stay Pending), as ``raytpu smoke`` checks; RuntimeFailure naming the holders first."""
    need = work.slices_spanned
    free, busy = occupancy.free_copies(client, work.slice, autopilot)
    if free < need:
        raise errors.RuntimeFailure(
            f"{work.name}: its {work.kind.name} RayJob needs {need} whole copy(ies) of slice {work.slice.name} and "
            f"only {free} of {work.slice.count} are free, so its pods would stay Pending (TPU chips are never shared) "
            "until its preRunningDeadlineSeconds: " +
            "; ".join(f"{pool} by {', '.join(pods)}" for pool, pods in busy.items()),
            "submit once the holders are gone, or give the job a slice of its own; `raytpu smoke` checks the free "
            "copies and reports the held ones as busy")


def check_api_key_secret(client: KubeClient, secret: str | None, namespace: str) -> None:
    """Refuses a RayService whose ``security.serve_api_key_secret`` does not exist (its pods would never start:
    the kubelet cannot mount a missing Secret). Not checked when reading Secrets is forbidden."""
    if secret is None:
        return
    try:
        found = client.get("Secret", secret)
    except KubeError as exc:
        if exc.status == 403:
            return
        raise
    if found is None:
        raise errors.invalid_value("security.serve_api_key_secret", secret, f"names no Secret in namespace "
                                   f"{namespace}", f"create it first: kubectl -n {namespace} create secret generic "
                                   f"{secret} --from-literal=api-key=$(openssl rand -hex 32)")


def check_team_secrets(client: KubeClient, work: WorkloadSpec, field: str, namespace: str) -> None:
    """Refuses a workload whose ``secrets`` name a Secret that does not exist or lacks the key the pods read: the
    kubelet would hold every Ray pod in CreateContainerConfigError (the slice held) until the RayJob's deadline.
    Not checked when reading Secrets is forbidden.
    Source: Kubernetes v1 ``SecretKeySelector`` (``optional`` unset: the Secret and its key must exist)."""
    found: list[errors.InvalidInput] = []
    for env_name, given in sorted((work.secrets or {}).items()):
        secret, key = run_env.secret_source(given)
        try:
            obj = client.get("Secret", secret)
        except KubeError as exc:
            if exc.status == 403:
                return
            raise
        keys = {*(obj or {}).get("data", {}), *(obj or {}).get("stringData", {})}
        create = f"kubectl -n {namespace} create secret generic {secret} --from-literal={key}=..."
        if obj is None:
            found.append(errors.invalid_value(f"{field}.{env_name}", secret, f"names no Secret in namespace "
                                              f"{namespace}", f"create it first: {create}"))
        elif key not in keys:
            found.append(errors.invalid_value(f"{field}.{env_name}", secret, f"has no key {key} "
                                              f"(it holds {', '.join(sorted(keys)) or 'no key'})",
                                              f"the value under key {key}: {create}"
                                              + ("" if key != run_env.SECRET_KEY else
                                                 f", or {{name: {secret}, key: KEY}} naming a key it holds")))
    errors.raise_found(found)


def operator_hint(spec: ClusterSpec, name: str) -> str:
    """The ``--wait`` line when the operator cannot reach the head: the sources the RayService's NetworkPolicy admits it
    from, and the option that changes them."""
    if spec.security.operator_from:
        admitted = f"{', '.join(spec.security.operator_from)} (security.operator_from)"
    else:
        admitted = (f"{spec.network.master_cidr} (network.master_cidr) and kube-system's konnectivity-agent pods "
                    "(the default)")
    return (f"warning: security.operator_from: {name}'s head pod has been Ready for {gke.OPERATOR_GRACE_S:g}s and "
            "KubeRay's operator has read no Serve status from its dashboard (:8265): its NetworkPolicy admits the "
            f"operator only from {admitted}; valid: where this cluster's operator runs (README, "
            "\"Operator reachability\"), e.g. namespace:<its namespace> for a self-installed KubeRay")


def wait_service(client: KubeClient, name: str, work: WorkloadSpec, namespace: str, timeout_s: float,
                 streams: Streams, unreached: str | None = None) -> int:
    """Waits until the RayService serves, then streams its in-cluster OpenAI endpoint and model; ``unreached`` goes
    to ``streams.err`` if the operator shows it cannot reach the head (:func:`raytpu.cluster.gke.wait_for_service`)."""
    if not gke.wait_for_service(client, name, timeout_s=timeout_s, progress=streams.err, unreached=unreached):
        raise errors.RuntimeFailure(f"{name}: RayService not ready after {timeout_s:g}s",
                                    "a larger --timeout-s, or the RayService's status conditions")
    root = f"http://{names.serve_service(name)}.{namespace}.svc.cluster.local:{serving.SERVE_PORT}"
    if work.runs_vllm:  # the kit's OpenAI app and its model; a team's own app answers at its root
        streams.out(f"endpoint: {root}/v1")
        streams.out(f"model: {work.model or vllm_rules.DEFAULT_MODEL}")
    else:
        streams.out(f"endpoint: {root}/")
    service = client.get("Service", names.serve_service(name))  # a load balancer's address, once GKE has given one
    for ingress in ((service or {}).get("status", {}).get("loadBalancer", {}).get("ingress") or [])[:1]:
        streams.out(f"load balancer: http://{ingress.get('ip') or ingress.get('hostname')}:{serving.SERVE_PORT}"
                    + ("/v1" if work.runs_vllm else "/"))
    return 0


def follow_job(client: KubeClient, name: str, kind: WorkloadKind, timeout_s: float, recorder: timeline.Recorder,
               streams: Streams, lines: list[str] | None = None, *, prefix: str = "", requirements: bool = False
               ) -> int:
    """Follows a RayJob: progress to ``streams.err``, the submitter's log to ``streams.out`` (kept in ``lines``), exit
    with its result; the timeline stamps the driver prints go to ``recorder``."""
    lines = [] if lines is None else lines
    streamer = gke.LogStreamer(client, name, sink=streams.keeping(lines))
    streamer.start()
    try:
        state = gke.follow_jobs(client, [name], timeout_s=timeout_s, progress=streams.err)[name]
    finally:
        streamer.stop()
        recorder.take(timeline.parse_stamp_lines("\n".join(lines)))
    if not state.done:
        raise errors.RuntimeFailure(f"{name}: still {state.describe()} after {timeout_s:g}s",
                                    "a larger --timeout-s, or the RayJob's status")
    verdicts = streams.verdicts(kind, lines)
    if not state.succeeded:
        from raytpu.teamcode import failures

        raise errors.RuntimeFailure(failures.failed_problem(f"{name}: RayJob ended {state.describe()}", lines),
                                    failures.failed_valid(lines, prefix, has_requirements=requirements))
    if kind.checks and not report.all_healthy(verdicts):
        raise errors.RuntimeFailure(f"{name}: smoke check found an unhealthy slice (or printed no verdict)",
                                    "every slice healthy")
    streams.err(f"RayJob {name}: {state.describe()}")
    return 0
