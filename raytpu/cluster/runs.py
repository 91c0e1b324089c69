"""``raytpu runs --stack`` through the Kubernetes API: the kit's RayJobs and RayServices, their driver's log, and cancel
(deleting the object frees the slice). Source: KubeRay v1.7.0 ``rayjob_controller.go`` (docs/FACTS.md#client-runs)."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from raytpu.cluster import gke, occupancy, queues
from raytpu.core.common import errors, names
from raytpu.core.manifests import kueue
from raytpu.runs.run_list import Run, carried_overrides, carried_spec, iso, unix

if TYPE_CHECKING:
    from raytpu.cluster.kube.kube_client import KubeClient

Sink = Callable[[str], None]

SELECTOR = ",".join(f"{key}={value}" for key, value in names.MANAGED_BY.items())
"""The label every object the kit makes carries."""
OBJECTS = ("RayJob", "RayService")
POLL_S = 1.0
"""How often cancel looks whether the object and its pods are gone."""
RAY_CLUSTER_LABEL = "ray.io/cluster"
"""KubeRay's label on every pod of a RayCluster. Source: KubeRay v1.7.0 ``utils/constant.go`` ``RayClusterLabelKey``."""
"""KubeRay's label on every pod of a RayJob's or RayService's clusters, naming it (every attempt's cluster).
Source: KubeRay v1.7.0 ``utils/constant.go`` ``RayOriginatedFromCRNameLabelKey``."""
TRAIN_LOGS = "/tmp/ray/session_latest/logs/train/ray-train-app-worker-*.log"
"""Where a Ray Train 2.60 worker's prints land in its pod. Source: Ray 2.60 ``LoggingManager``
(docs/FACTS.md#client-runs)."""


def _carried_env(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A RayJob's runtime env's ``env_vars`` (``runtimeEnvYAML``: the kit writes JSON, a user may write YAML)."""
    import yaml

    try:
        runtime = yaml.safe_load(str((obj.get("spec") or {}).get("runtimeEnvYAML") or "{}"))
    except yaml.YAMLError:
        return {}
    return dict(runtime.get("env_vars") or {}) if isinstance(runtime, dict) else {}


def to_run(kind: str, obj: Mapping[str, Any], now: float) -> Run:
    """One RayJob or RayService as a :class:`Run` (its state as KubeRay writes it)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = obj.get("status") or {}
    created = unix(str(meta.get("creationTimestamp", "")))
    if kind == "RayJob":
        state = gke.job_state(str(meta.get("name")), obj)
        text, done = state.status, state.done
        workload = str(carried_spec(_carried_env(obj)).get("name", ""))
        started = unix(str(status.get("startTime", ""))) or created
    else:
        text = "Ready" if gke.service_ready(obj) else str(status.get("serviceStatus") or "NotReady")
        done, workload, started = False, str(meta.get("name", "")), created
    return Run(run=str(meta.get("name", "")), object=kind, kind=str(labels.get(names.WORKLOAD_LABEL, "")),
               workload=workload, slice=str(labels.get(names.SLICE_LABEL, "")), state=text,
               age_s=None if created is None else round(now - created, 1),
               started_at=iso(started), done=done, overrides=carried_overrides(meta.get("annotations")))


def list_runs(client: KubeClient, now: float | None = None) -> list[Run]:
    """The kit's RayJobs and RayServices in the client's namespace, oldest first; any workload kind. A team's queued
    RayJob carries where it stands in Kueue's queue (:mod:`raytpu.cluster.queues`)."""
    at = time.time() if now is None else now
    found = [(kind, obj) for kind in OBJECTS for obj in client.objects(kind, SELECTOR)]
    states = queues.states(client) if any(kueue.QUEUE_LABEL in ((o.get("metadata") or {}).get("labels") or {})
                                           for _, o in found) else {}
    runs = []
    for kind, obj in found:
        run = to_run(kind, obj, at)
        state = states.get(str((obj.get("metadata") or {}).get("uid", "")))
        if state is not None and not run.done:
            run = dataclasses.replace(run, queue=dataclasses.asdict(state),
                                      waiting_for=state.line() if state.position is not None else run.waiting_for)
        runs.append(run)
    return sorted(runs, key=lambda r: (-(r.age_s or 0.0), r.run))


def queue_usage(client: KubeClient) -> list[str]:
    """The namespace's queue: chips in use (against the quota, where this user may read it) and runs waiting."""
    return queues.usage(client)


def ray_clusters(obj: Mapping[str, Any] | None) -> list[str]:
    """The RayClusters a RayJob or RayService runs on (from its status)."""
    status = (obj or {}).get("status") or {}
    found = [status.get("rayClusterName")] + [(status.get(side) or {}).get("rayClusterName")
                                              for side in ("activeServiceStatus", "pendingServiceStatus")]
    return [str(name) for name in found if name]


def driver_log(client: KubeClient, run: Run, *, follow: bool, timeout_s: float, sink: Sink) -> None:
    """The driver's output: a RayJob's submitter pod log (``--follow``: streamed until the job ends, as ``submit
    --wait`` does), a RayService's head pod log. RuntimeFailure when there is no such pod to read."""
    if run.object == "RayService":
        heads = [pod for cluster in ray_clusters(client.get("RayService", run.run))
                 for pod in client.pods(f"{RAY_CLUSTER_LABEL}={cluster},ray.io/node-type=head")]
        if not heads:
            raise errors.RuntimeFailure(f"{run.run}: no head pod yet", "raytpu runs, until it is Ready")
        for line in client.logs(str(heads[0]["metadata"]["name"]), container="ray-head", follow=follow):
            sink(line)
        return
    if not follow:
        shown = False
        for line in client.job_logs(run.run):
            shown = True
            sink(line)
        if not shown:
            raise errors.RuntimeFailure(f"{run.run}: no submitter pod (not started yet, or removed with its job)",
                                        "--follow to wait for it")
        return
    streamer = gke.LogStreamer(client, run.run, sink=sink)
    streamer.start()
    try:
        state = gke.follow_jobs(client, [run.run], timeout_s=timeout_s)[run.run]
    finally:
        streamer.stop()
    if not state.done:  # the follow ends with the run, or says why it did not (issue 49: it stopped at 1 h, exit 0)
        raise errors.RuntimeFailure(f"{run.run}: still {state.describe()} after --timeout-s {timeout_s:g} (the run "
                                    "goes on; only the following stopped)",
                                    f"raytpu runs logs {run.run} --follow again, or raytpu runs cancel {run.run}")


def rank_log(client: KubeClient, run: Run, rank: int) -> None:
    """A rank's output is not reachable through the Kubernetes API: RuntimeFailure saying where it is and how to
    read it. It is in files of the worker pod, and ``pods/log`` serves only a container's stdout and stderr."""
    pods = [str(pod["metadata"]["name"]) for cluster in ray_clusters(client.get(run.object, run.run))
            for pod in client.pods(f"{RAY_CLUSTER_LABEL}={cluster},ray.io/node-type=worker")]
    where = errors.listing(pods) if pods else "none left"
    raise errors.RuntimeFailure(
        f"{run.run}: rank {rank}'s output is in {TRAIN_LOGS} inside its worker pod ({where}), not in any container's "
        "log: Ray Train 2.60 writes the training function's prints to its session log files, and the kit's "
        "workloads start Ray with log_to_driver=False, so pods/log (a container's stdout and stderr) has none of it",
        f"read the file through pods/exec, which this client does not open: kubectl exec -n {client.namespace} "
        f"POD -c ray-worker -- sh -c 'cat {TRAIN_LOGS}' (records carry world_rank), or raytpu runs logs --local "
        "for a run on the emulated slice")


def _run_pods(client: KubeClient, run: str, clusters: list[str]) -> list[str]:
    """The names of the pods left of ``run``: its known clusters' and every pod marked as the run's (any attempt)."""
    pods = [p for c in clusters for p in client.pods(f"{RAY_CLUSTER_LABEL}={c}")]
    pods += occupancy.pods_of(client, "RayJob", run)
    return sorted({str((p.get("metadata") or {}).get("name")) for p in pods})


def cancel(client: KubeClient, run: Run, *, timeout_s: float, progress: Sink | None = None) -> None:
    """Deletes the RayJob or RayService, then waits until it and every Ray cluster's pods are gone (the slice free):
    the clusters in its status and any pod KubeRay marks as the run's (an earlier attempt's cluster, still going, is
    no longer in the status); RuntimeFailure when that takes longer than ``timeout_s``.
    Source: KubeRay v1.7.0 ``utils/constant.go`` ``RayOriginatedFromCRNameLabelKey``
    (docs/FACTS.md#client-occupancy)."""
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    deadline = time.monotonic() + timeout_s
    clusters = ray_clusters(client.get(run.object, run.run))
    if client.delete(run.object, run.run):
        say(f"{run.run}: {run.object} deleted (KubeRay stops its Ray job; its Ray cluster goes with it)")
    while client.get(run.object, run.run) is not None:  # KubeRay's finalizer stops the Ray job first
        if time.monotonic() > deadline:
            raise errors.RuntimeFailure(f"{run.run}: {run.object} still there after {timeout_s:g}s",
                                        "its finalizers (KubeRay's operator must be running), or a larger --timeout-s")
        time.sleep(POLL_S)
    while left := _run_pods(client, run.run, clusters):
        if time.monotonic() > deadline:
            raise errors.RuntimeFailure(f"{run.run}: {len(left)} pod(s) of its Ray cluster still there after "
                                        f"{timeout_s:g}s", "a larger --timeout-s, or the pods' events")
        time.sleep(POLL_S)
    say(f"{run.run}: cancelled; no pod of its Ray cluster is left (slice {run.slice or '-'} free)")
