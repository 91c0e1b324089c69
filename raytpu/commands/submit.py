"""``raytpu submit WORKLOAD --stack NAME``: run one workload of ``raytpu.yaml`` on a deployed stack (or, with
``--local``, on the emulated slice).

The workload's KubeRay object (:func:`raytpu.core.kuberay.workload_manifest`) is built from the config's spec and
the stack outputs (endpoint, CA, namespace, KSA, bucket; :class:`raytpu.outputs.StackOutputs`) and
server-side applied through the Kubernetes API with Application Default Credentials (:mod:`raytpu.cluster.gke`):
no kubectl, no gcloud. RayJobs get a run suffix (``train-t5x2kq``) so every submission is a new run with its
own checkpoint directory (train: ``--name`` is that name, under the bucket's GCS FUSE mount,
:meth:`raytpu.core.kinds.WorkloadKind.run_args`); a RayService keeps its name (applying again updates it). ``--wait``
follows the job to its end (progress on stderr, the submitter's log streamed to stdout) and exits with its result; for a
RayService it waits until it serves and prints the endpoint. Exit 0 on success, 1 when the job failed, timed
out or a slice is unhealthy, 2 on bad input (unknown workload, missing outputs).

``--local`` submits the same program, with the same spec in ``RAYTPU_WORKLOAD``, to the running emulated slice
(``raytpu local up``) through Ray's Job Submission API and follows it the same way.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raytpu.core.kinds import WorkloadKind
    from raytpu.core.report import Verdict
    from raytpu.core.spec import ClusterSpec, WorkloadSpec
    from raytpu.core.timeline import Recorder, Timeline

HELP = "apply a workload of raytpu.yaml (RayJob or RayService) to a deployed stack, optionally waiting for it"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds WORKLOAD and the stack, config, outputs, wait and dry-run options."""
    from raytpu import argtypes
    from raytpu.cli_args import add_stack_arguments

    parser.add_argument("workload", metavar="WORKLOAD", help="a workload name from the config's workloads list")
    add_stack_arguments(parser, stack_note="; required unless --local")
    parser.add_argument("--wait", action="store_true", help="wait for the RayJob to finish (RayService: ready)")
    parser.add_argument("--timeout-s", type=argtypes.positive_seconds, default=3600.0,
                        help="how long --wait waits (default 3600)")
    parser.add_argument("--local", action="store_true",
                        help="run it on the emulated slice (`raytpu local up`) through Ray's Job Submission API "
                             "and follow it; --stack and --outputs are not needed")
    parser.add_argument("--dir", default=None, type=argtypes.path,
                        help="with --local: the local cluster's run directory")
    parser.add_argument("--report", default=None, type=argtypes.path, metavar="FILE",
                        help="with --wait: also write the run's timeline (where the minutes went) as JSON to FILE")


def run(args: argparse.Namespace) -> int:
    """Builds, applies and (with --wait) follows the workload."""
    from raytpu import config as config_mod
    from raytpu import images
    from raytpu.cli_args import print_yaml
    from raytpu.cluster import gke, google_api
    from raytpu.core import errors, kuberay, names
    from raytpu.images.record import load_refs
    from raytpu.outputs import StackOutputs

    args.config = config_mod.choose(args.config)
    spec = config_mod.load(args.config)
    work = spec.workload(args.workload)
    if (args.report is not None and not (args.wait or args.local)) or args.report == "":
        raise errors.invalid_value("--report", args.report, "is the timeline of a run that is followed",
                                   "a file path, with --wait or --local")
    if args.local:
        return _run_local(work, args)
    if not args.stack:
        raise errors.missing("--stack", "(or --local)", "the cluster stack's id, <cluster name>-cluster")
    outputs = StackOutputs.read(args.outputs, args.stack, spec, args.config)
    # every RayJob submission is a new run: its own name, and (train) its own checkpoint directory
    name = f"{work.name}-{args.run_id or gke.run_id()}" if work.kind.is_job else work.name
    refs = load_refs(args.config)  # a preview (--dry-run) shows an unbuilt image as a placeholder, marked
    resolve = images.preview_resolver if args.dry_run else images.resolver
    manifest = kuberay.workload_manifest(spec, work, images=resolve(refs, stack=args.stack),
                                         service_account=outputs.service_account,
                                         bucket=outputs.bucket, namespace=outputs.namespace,
                                         py_modules=args.py_modules, name=name,
                                         args=work.kind.run_args(name))
    if args.dry_run:
        manifests = kuberay.with_network_policies([manifest], spec)
        header = images.mark_preview(manifests, [n for n in [images.unbuilt(work, refs)] if n])
        print(header, end="")
        print_yaml(manifests)
        return 0
    if args.upload_core:
        google_api.upload_core(google_api.upload_target(args.py_modules, outputs.bucket))
    from raytpu.core import timeline
    recorder = timeline.Recorder.for_command()
    with gke.connect(outputs) as client:
        client.check_schema(manifest, kuberay.MIN_KUBERAY_VERSION)
        if manifest["kind"] == "RayService":
            _check_api_key_secret(client, spec.security.serve_api_key_secret, outputs.namespace)
        if work.kind.checks:
            _check_free(client, work, spec.cluster.autopilot)
        if work.kind.is_job and client.get("RayJob", name) is not None:
            # server-side apply would update that run in place: a new run never reuses a name
            raise errors.invalid_value("--run-id", name.removeprefix(f"{work.name}-"), f"names RayJob {name}, "
                                       "which exists (run ids are base-36 seconds: two submissions in one second "
                                       "share one)", "a --run-id of no existing run, or resubmit a second later")
        gke.apply_with_network_policy(client, manifest, spec)
        kind = manifest["kind"]
        recorder.mark("applied", f"{kind} {name} applied (server-side apply)")
        print(f"applied {kind} {name} in namespace {outputs.namespace}", file=sys.stderr)
        if work.kind.trains:
            print(f"checkpoints: {names.checkpoint_uri(outputs.bucket, name)}", file=sys.stderr)
        if not args.wait:
            print(f"submitted {kind} {name}; `raytpu submit {work.name} --stack {args.stack} --wait` follows "
                  "a service, a job's progress is its RayJob status")
            return 0
        from raytpu.cluster.kube_timeline import KubePhases

        watcher = KubePhases(client, name, manifest, multi_host=not work.plan.single_host).start()
        try:
            if kind == "RayService":
                return _wait_service(client, name, work, outputs.namespace, args.timeout_s,
                                     unreached=_operator_hint(spec, name))
            return _follow_job(client, name, work.kind, args.timeout_s, recorder)
        finally:
            watcher.stop()
            watcher.apply_to(recorder)
            if kind == "RayService":
                for phase, why in service_unmeasured(spec.security.serve_endpoint).items():
                    recorder.note(phase, why)
            _show_timeline(recorder.finish(), name, args.report, watcher.problem)


def service_unmeasured(serve_endpoint: str) -> dict[str, str]:
    """Why ``submit --wait`` leaves a RayService's Ray phases and first token ``not measured``: no program of ours
    runs in the cluster to stamp them, and this command sends no request of its own to the endpoint, which it can
    reach only in some setups (``security.serve_endpoint``) and, public, only with a key it does not read."""
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
    return {"ray_joined": inside, "reserved": inside,
            "first_step": f"first token not measured by `submit --wait`: {where}; `raytpu demo --serve` measures "
                          "it on the emulated slice with the openai client"}


def _show_timeline(run: Timeline, name: str, path: str | None, problem: str | None) -> None:
    """Prints the run's timeline as a table (stderr: stdout carries the driver's log) and writes it as JSON to
    ``path`` (``{"run", "timeline"}``)."""
    import json
    from pathlib import Path

    from raytpu.core import errors, timeline
    print(timeline.render(run, f"{name}: where the minutes went"), file=sys.stderr)
    if problem:
        print(f"warning: timeline: the last look at {name}'s pods failed ({problem})", file=sys.stderr)
    if path:
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(json.dumps({"run": name, "timeline": run}, indent=2, sort_keys=True) + "\n")
        except OSError as exc:
            raise errors.RuntimeFailure(f"--report: cannot write {path!r} ({exc.strerror})",
                                        "a writable file path") from exc


def _check_free(client: Any, work: WorkloadSpec, autopilot: bool) -> None:
    """A smoke RayJob needs every copy it spans whole, as ``raytpu smoke`` checks
    (:func:`raytpu.cluster.occupancy.holders`): a copy another workload holds (a RayService) would leave its pods
    Pending, since ``google.com/tpu`` chips are never shared. Raises RuntimeFailure naming the holders, before
    anything is applied."""
    from raytpu.cluster import occupancy
    from raytpu.core import errors

    held = {work.slice.pool_names[i]: occupancy.holders(client, work.slice, i, autopilot)
            for i in range(work.slices_spanned)}
    busy = {pool: pods for pool, pods in held.items() if pods}
    if busy:
        raise errors.RuntimeFailure(
            f"{work.name}: slice copy(ies) in use, so a smoke job's pods would stay Pending (TPU chips are never "
            "shared): " + "; ".join(f"{pool} by {', '.join(pods)}" for pool, pods in busy.items()),
            "submit once the holders are gone, or `raytpu smoke`, which checks the free copies and reports the "
            "held ones as busy")


def _check_api_key_secret(client: Any, secret: str | None, namespace: str) -> None:
    """Refuses a RayService whose ``security.serve_api_key_secret`` does not exist (its pods would never start:
    the kubelet cannot mount a missing Secret). Not checked when reading Secrets is forbidden."""
    from raytpu.cluster.kube_errors import KubeError
    from raytpu.core import errors

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


def _operator_hint(spec: ClusterSpec, name: str) -> str:
    """The line ``--wait`` prints when KubeRay's operator cannot reach the head
    (:func:`raytpu.cluster.gke.operator_unreached`): the sources the RayService's NetworkPolicy admits it from, and
    the option that changes them."""
    from raytpu.cluster import gke

    if spec.security.operator_from:
        admitted = f"{', '.join(spec.security.operator_from)} (security.operator_from)"
    else:
        admitted = (f"{spec.network.master_cidr} (network.master_cidr) and kube-system's konnectivity-agent pods "
                    "(the default)")
    return (f"warning: security.operator_from: {name}'s head pod has been Ready for {gke.OPERATOR_GRACE_S:g}s and "
            "KubeRay's operator has read no Serve status from its dashboard (:8265): its NetworkPolicy admits the "
            f"operator only from {admitted}; valid: where this cluster's operator runs (README, "
            "\"Operator reachability\"), e.g. namespace:<its namespace> for a self-installed KubeRay")


def _wait_service(client: Any, name: str, work: WorkloadSpec, namespace: str, timeout_s: float,
                  unreached: str | None = None) -> int:
    """Waits until the RayService serves, then prints its in-cluster OpenAI endpoint and model; ``unreached`` is
    printed if the operator shows it cannot reach the head (:func:`raytpu.cluster.gke.wait_for_service`)."""
    from raytpu.cluster import gke
    from raytpu.core import errors, names, serving, vllm_rules

    if not gke.wait_for_service(client, name, timeout_s=timeout_s, unreached=unreached):
        raise errors.RuntimeFailure(f"{name}: RayService not ready after {timeout_s:g}s",
                                    "a larger --timeout-s, or the RayService's status conditions")
    print(f"endpoint: http://{names.serve_service(name)}.{namespace}.svc.cluster.local:{serving.SERVE_PORT}/v1")
    print(f"model: {work.model or vllm_rules.DEFAULT_MODEL}")
    service = client.get("Service", names.serve_service(name))  # a load balancer's address, once GKE has given one
    for ingress in ((service or {}).get("status", {}).get("loadBalancer", {}).get("ingress") or [])[:1]:
        print(f"load balancer: http://{ingress.get('ip') or ingress.get('hostname')}:{serving.SERVE_PORT}/v1")
    return 0


def _follow_job(client: Any, name: str, kind: WorkloadKind, timeout_s: float, recorder: Recorder) -> int:
    """Follows a RayJob: progress on stderr, the submitter's log on stdout, exit with its result; the timeline
    stamps the driver prints go to ``recorder``."""
    from raytpu.cluster import gke
    from raytpu.core import errors, report, timeline

    lines: list[str] = []
    streamer = gke.LogStreamer(client, name, sink=_echo(lines))
    streamer.start()
    try:
        state = gke.follow_jobs(client, [name], timeout_s=timeout_s)[name]
    finally:
        streamer.stop()
        recorder.take(timeline.parse_stamp_lines("\n".join(lines)))
    if not state.done:
        raise errors.RuntimeFailure(f"{name}: still {state.describe()} after {timeout_s:g}s",
                                    "a larger --timeout-s, or the RayJob's status")
    verdicts = _show_verdicts(kind, lines)
    if not state.succeeded:
        raise errors.RuntimeFailure(f"{name}: RayJob ended {state.describe()}", "see its driver log above")
    if kind.checks and not report.all_healthy(verdicts):
        raise errors.RuntimeFailure(f"{name}: smoke check found an unhealthy slice (or printed no verdict)",
                                    "every slice healthy")
    print(f"RayJob {name}: {state.describe()}", file=sys.stderr)
    return 0


def _echo(lines: list[str]) -> Callable[[str], None]:
    """A log sink that prints each driver line and keeps it (for the verdicts a smoke job prints)."""

    def show(line: str) -> None:
        lines.append(line)
        print(line, flush=True)

    return show


def _show_verdicts(kind: WorkloadKind, lines: list[str]) -> list[Verdict]:
    """A checking job's verdicts (:attr:`raytpu.core.kinds.WorkloadKind.checks`), printed as the table ``raytpu smoke``
    prints; none for other kinds."""
    from raytpu.core import report
    if not kind.checks:
        return []
    verdicts = report.parse_verdict_lines("\n".join(lines))
    print(report.render_table(verdicts))
    return verdicts


def _run_local(work: WorkloadSpec, args: argparse.Namespace) -> int:
    """``--local``: the same program and spec on the emulated slice, through Ray's Job Submission API."""
    from raytpu import local
    from raytpu.cluster import gke
    from raytpu.core import errors, timeline
    from raytpu.local.from_config import job_workload
    from raytpu.local.phases import emulated_phases

    if not work.kind.is_job:
        raise errors.invalid_value("WORKLOAD", work.name, f"is a {work.kind.object_kind}; --local runs RayJobs",
                                   "a job workload (smoke, train)")
    cluster = local.LocalCluster.load(local.run_dir(args.dir))
    if cluster is None:
        raise errors.RuntimeFailure(f"local: no local cluster recorded in {local.run_dir(args.dir)}",
                                    "start one with `raytpu local up`")
    run_name = f"{work.name}-{args.run_id or gke.run_id()}"
    # the run dir stands in for the pods' GCS FUSE mount: <run dir>/checkpoints/<run name>, as on GKE
    extra = work.kind.run_args(run_name, mount_path=cluster.run_dir)
    recorder = timeline.Recorder.for_command()
    emulated_phases(recorder, cluster.hosts_recorded_wall())
    recorder.mark("applied", f"{run_name} submitted through Ray's Job Submission API (the emulated RayJob)",
                  timeline.EMULATED)
    lines: list[str] = []
    try:
        status = local.submit_job(cluster, work.kind.name, *extra, timeout_s=args.timeout_s, sink=_echo(lines),
                                  work=job_workload(cluster, work))
    finally:
        recorder.take(timeline.parse_stamp_lines("\n".join(lines)))
        _show_timeline(recorder.finish(), run_name, args.report, None)
    _show_verdicts(work.kind, lines)
    if status != "SUCCEEDED":
        raise errors.RuntimeFailure(f"{run_name}: Ray job ended {status}", "see its driver log above")
    print(f"Ray job {run_name}: {status}", file=sys.stderr)
    return 0
