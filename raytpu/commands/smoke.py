"""``raytpu smoke --stack NAME``: the nightly check of every TPU slice of a deployed stack.

One single-slice smoke RayJob per slice copy (``count`` jobs per config slice,
:func:`raytpu.core.manifests.kuberay.smoke_jobs`), server-side applied through the Kubernetes API
(:mod:`raytpu.cluster.gke`), but only to copies nothing else holds: a copy a workload is using is reported ``busy``
(with its holders,
:mod:`raytpu.cluster.occupancy`) and gets no job, so smoke never splits a slice with a workload. The jobs are
watched together (progress on stderr) up to ``--timeout-s``; each job's driver log (its K8sJobMode submitter
pod) is searched for its ``RAYTPU_SMOKE_VERDICT`` line. A job whose pods never got capacity (scheduling
events) is ``unschedulable``; one that failed, timed out otherwise or printed no verdict is ``unhealthy``.
The table goes to stdout, ``smoke.json`` and ``smoke.junit.xml`` to ``--report`` (default ``reports/``).
Exit 1 only when a slice is unhealthy (``--strict``: also busy or unschedulable), 0 otherwise, 2 on bad input.
Slices whose provisioning cannot run a Ray cluster (queued) are skipped with a warning.

Multi-slice: for a slice whose copies a multi-slice workload joins over DCN (``workloads[].slices: N``), one more
RayJob, ``smoke-<slice>-dcn`` (:func:`raytpu.core.manifests.kuberay.dcn_smoke_jobs`), spans N copies as that workload's
RayJob does and adds the cross-slice all-reduce to its verdicts (their ``dcn`` section). It runs after the per-copy
jobs, which are deleted once read so they never compete for the copies, and only when N copies are free of holders:
otherwise it is reported ``busy``, not run, with the busy copies named; never placed on part of its slices.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Any

from raytpu.core.tpu.plan import SlicePlan

if TYPE_CHECKING:
    from raytpu.cluster.gke import JobState
    from raytpu.cluster.kube.kube_client import KubeClient
    from raytpu.core.common.report import Verdict
    from raytpu.core.common.timeline import Timeline
    from raytpu.core.specs.spec import ClusterSpec

HELP = "run the smoke check on every slice of a deployed stack; JSON + JUnit report; exit 1 if one is unhealthy"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the stack options, ``--report``, ``--timeout-s`` and ``--image``."""
    from raytpu.console import argtypes
    from raytpu.console.cli_args import add_stack_arguments

    add_stack_arguments(parser)
    parser.add_argument("--report", default="reports", type=argtypes.path,
                        help="directory for smoke.json, smoke.junit.xml and report.html (default reports)")
    parser.add_argument("--timeout-s", type=argtypes.positive_seconds, default=1800.0,
                        help="how long to wait for all smoke jobs (default 1800)")
    parser.add_argument("--image", type=argtypes.image,
                        help="image of the smoke jobs (default: the config's smoke workload image)")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 for busy and unschedulable slices too (default: only for unhealthy ones)")


def failed_verdict(job: dict[str, Any], plan: SlicePlan, problem: str, state: str = "unhealthy") -> Verdict:
    """The verdict of a job that gave none: ``state`` (unhealthy, busy, unschedulable), ``problem`` its one check."""
    return {
        "slice": job["metadata"]["name"], "job": job["metadata"]["name"], "healthy": False, "state": state,
        "generation": plan.generation, "topology": plan.topology, "pod_type": plan.ray_pod_type,
        "hosts_expected": plan.hosts, "hosts_found": 0, "duration_s": 0.0,
        "checks": [{"name": "job" if state == "unhealthy" else state, "ok": False, "detail": problem, "value": None,
                    "expected": None}],
        "hosts": [],
    }


def run(args: argparse.Namespace) -> int:
    """Applies the smoke jobs, waits, collects verdicts, prints the table and writes the reports."""
    from raytpu import config as config_mod
    from raytpu import images
    from raytpu.cluster import gke, google_api, occupancy
    from raytpu.cluster.outputs import StackOutputs
    from raytpu.console import report_html
    from raytpu.console.cli_args import print_yaml
    from raytpu.core.common import errors, names, report, timeline
    from raytpu.core.manifests import kuberay, smoke_runs
    from raytpu.images.record import load_refs

    args.config = config_mod.choose(args.config)
    spec = config_mod.load(args.config)
    outputs = StackOutputs.read(args.outputs, args.stack, spec, args.config)
    suffix = args.run_id or names.run_id()
    refs = load_refs(args.config, outputs.registry or None)  # a preview shows an unbuilt image as a placeholder
    resolver = images.preview_resolver if args.dry_run else images.resolver
    jobs = kuberay.smoke_jobs(spec, images=resolver(refs, stack=args.stack),
                              service_account=outputs.service_account, bucket=outputs.bucket,
                              namespace=outputs.namespace, py_modules=args.py_modules, image=args.image,
                              suffix=suffix)
    dcn_jobs = kuberay.dcn_smoke_jobs(spec, images=resolver(refs, stack=args.stack),
                                      service_account=outputs.service_account, bucket=outputs.bucket,
                                      namespace=outputs.namespace, py_modules=args.py_modules, image=args.image,
                                      suffix=suffix)
    skipped = [s.name for s in spec.slices if not s.provisioning.runs_ray]
    for name in skipped:
        print(f"warning: slice {name}: skipped ({spec.slice_named(name).provisioning.name} provisioning cannot run a "
              "RayJob with workers)", file=sys.stderr)
    if not jobs:
        raise errors.InvalidInput("slices", "no slice can run a smoke RayJob",
                                  "at least one slice whose provisioning runs a Ray cluster")
    if args.dry_run:
        manifests = kuberay.with_network_policies([*jobs, *dcn_jobs], spec)
        smoke = [run.work for run in smoke_runs.smoke_workloads(spec, args.image)]
        print(images.mark_preview(manifests, sorted({n for n in (images.unbuilt(w, refs) for w in smoke) if n})),
              end="")
        print_yaml(manifests)
        return 0
    if args.upload_core:
        google_api.upload_core(google_api.upload_target(args.py_modules, outputs.bucket))
    started = time.monotonic()
    verdicts: list[Verdict] = []
    timelines: dict[str, timeline.Timeline] = {}
    with gke.connect(outputs) as client:
        client.check_schema(jobs[0], kuberay.MIN_KUBERAY_VERSION)  # every smoke job has the same fields
        free = []
        for job in jobs:
            item = spec.slice_named(job["metadata"]["labels"][names.SLICE_LABEL])
            index = int(job["metadata"]["name"].removesuffix(f"-{suffix}").rsplit("-", 1)[1])
            held_by = occupancy.holders(client, item, index, spec.cluster.autopilot)
            if held_by:
                print(f"slice {item.pool_names[index]}: busy ({', '.join(held_by)}); no smoke job", file=sys.stderr)
                verdicts.append(failed_verdict(job, item.plan, f"in use by {', '.join(held_by)}", "busy"))
                continue
            free.append(job)
        _run_jobs(client, free, spec, args.timeout_s, verdicts, timelines)
        if dcn_jobs:
            released = _release(client, free)
            ready = []
            for job in dcn_jobs:
                problem = _dcn_busy(client, job, spec, released)
                if problem:
                    print(f"RayJob {job['metadata']['name']}: not run ({problem})", file=sys.stderr)
                    item = spec.slice_named(job["metadata"]["labels"][names.SLICE_LABEL])
                    verdicts.append(failed_verdict(job, item.plan, f"not run: {problem}", "busy"))
                else:
                    ready.append(job)
            left_s = max(args.timeout_s - (time.monotonic() - started), 1.0)
            _run_jobs(client, ready, spec, left_s, verdicts, timelines)
    print(report.render_table(verdicts))
    for name, run_timeline in timelines.items():
        print()
        print(timeline.render(run_timeline, f"{name}: where the minutes went"))
    try:
        json_path, junit_path = report.write_reports(verdicts, args.report, extra={
            "stack": args.stack, "cluster": outputs.cluster_name, "run_id": suffix, "skipped_slices": skipped,
            "wall_s": round(time.monotonic() - started, 1)}, timelines=timelines)
        page = report_html.write_beside(json_path)
    except OSError as exc:
        raise errors.RuntimeFailure(f"--report: cannot write {args.report!r} ({exc.strerror})",
                                    "a writable directory") from exc
    print(f"reports: {json_path} {junit_path} {page}", file=sys.stderr)
    gating = set(report.STATES) - {"healthy"} if args.strict else {"unhealthy"}
    bad = [f"{v.get('job') or v.get('slice')} {report.state_of(v)}" for v in verdicts
           if report.state_of(v) in gating]
    if bad:
        raise errors.RuntimeFailure(f"smoke: {len(bad)} of {len(verdicts)} slices failed ({', '.join(bad)}); "
                                    f"valid: every slice healthy (details in {json_path})")
    return 0


def _run_jobs(client: KubeClient, jobs: list[dict[str, Any]], spec: ClusterSpec, timeout_s: float,
              verdicts: list[Verdict], timelines: dict[str, Timeline]) -> None:
    """Applies ``jobs`` (each behind its NetworkPolicy), follows them together up to ``timeout_s`` and adds their
    verdicts and timelines."""
    from raytpu.cluster import gke
    from raytpu.cluster.kube_timeline import KubePhases
    from raytpu.core.common import names, timeline

    recorders: dict[str, timeline.Recorder] = {}
    watchers: dict[str, KubePhases] = {}
    try:
        for job in jobs:
            name = job["metadata"]["name"]
            plan = spec.slice_named(job["metadata"]["labels"][names.SLICE_LABEL]).plan
            recorders[name] = timeline.Recorder.for_command()
            gke.apply_with_network_policy(client, job, spec)
            recorders[name].mark("applied", f"RayJob {name} applied (server-side apply)")
            watchers[name] = KubePhases(client, name, job, multi_host=not plan.single_host).start()
            print(f"applied RayJob {name}", file=sys.stderr)
        if not jobs:
            return
        states = gke.follow_jobs(client, [j["metadata"]["name"] for j in jobs], timeout_s=timeout_s)
        for job in jobs:
            name = job["metadata"]["name"]
            log = "\n".join(client.job_logs(name))
            verdicts.extend(_job_verdicts(client, job, states[name], spec, timeout_s, log))
            watcher = watchers.pop(name)
            watcher.stop()
            watcher.apply_to(recorders[name])
            recorders[name].take(timeline.parse_stamp_lines(log))
            timelines[name] = recorders[name].finish(f"RayJob {states[name].describe()}")
    finally:
        for watcher in watchers.values():  # a failure above: no thread goes on looking past the command
            watcher.stop(final_look=False)


def _release(client: KubeClient, jobs: list[dict[str, Any]]) -> set[str]:
    """Deletes the per-copy smoke RayJobs whose verdicts are read (KubeRay would keep their clusters for
    ``ttlSecondsAfterFinished``; the delete takes their RayCluster and pods with them, background propagation), so
    their copies come free for the multi-slice job; returns their names, whose terminating pods hold nothing."""
    names = {j["metadata"]["name"] for j in jobs}
    for name in sorted(names):
        client.delete("RayJob", name)
    return names


def _dcn_busy(client: KubeClient, job: dict[str, Any], spec: ClusterSpec, released: set[str]) -> str | None:
    """Why multi-slice smoke ``job`` cannot run now: fewer copies of its slice free of holders than the N it spans
    (:mod:`raytpu.cluster.occupancy`), the busy ones named; None when N are free. All or none: it is never placed
    on part."""
    from raytpu.cluster import occupancy
    from raytpu.core.common import names
    from raytpu.core.manifests import kuberay

    item = spec.slice_named(job["metadata"]["labels"][names.SLICE_LABEL])
    span = kuberay.ray_cluster_of(job)["workerGroupSpecs"][0]["replicas"]
    free, busy = occupancy.free_copies(client, item, spec.cluster.autopilot, releasing=released)
    if free >= span:
        return None
    named = "; ".join(f"{pool}: {', '.join(pods)}" for pool, pods in busy.items())
    return (f"spans {span} copies of slice {item.name} over DCN and only {free} of {item.count} are free "
            f"(busy: {named})")


def _job_verdicts(client: KubeClient, job: dict[str, Any], state: JobState, spec: ClusterSpec, timeout_s: float,
                  log: str) -> list[Verdict]:
    """The verdicts one smoke job gave (in its driver ``log``), or the one that explains why it gave none."""
    from raytpu.cluster import occupancy
    from raytpu.core.common import names, report

    name = job["metadata"]["name"]
    found = report.parse_verdict_lines(log)
    plan = spec.slice_named(job["metadata"]["labels"][names.SLICE_LABEL]).plan
    if not found:
        never_ran = state.deployment in ("", "New", "Initializing", "Waiting") or "PreRunning" in state.reason
        reason = occupancy.unschedulable_reason(client, name) if never_ran or not state.done else None
        if reason:
            return [failed_verdict(job, plan, f"no capacity: {reason}", "unschedulable")]
        why = (f"no {report.MARKER} line in the job's log; RayJob {state.describe()}" if state.done
               else f"timed out after {timeout_s:g}s; RayJob {state.describe()}")
        return [failed_verdict(job, plan, why)]
    if not state.succeeded:
        for v in found:
            v["healthy"] = False
            v.setdefault("checks", []).append({"name": "job", "ok": False, "value": None, "expected": None,
                                               "detail": f"RayJob ended {state.describe()}"})
    for v in found:
        v.setdefault("job", name)
    return found
