"""``raytpu submit WORKLOAD --stack NAME``: apply one workload of ``raytpu.yaml`` to a deployed stack.

The workload's KubeRay object (:func:`raytpu.kuberay.workload_manifest`) is built from the config and the
stack outputs (cluster, location, KSA, bucket; see :mod:`raytpu.gke` for the outputs file shapes) and
piped to ``kubectl apply -f -``. RayJobs get a run suffix (``train-t5x2kq``) so every submission is a
new job; a RayService keeps its name (re-applying updates it). ``--wait`` follows the job to its end
(progress on stderr), prints its driver log (the K8sJobMode submitter Job's ``kubectl logs``) and, for a
smoke workload, the verdict table. Exit 0 on success, 1 when the job failed, timed out or a slice is
unhealthy, 2 on bad input (unknown workload, missing outputs file).
"""

from __future__ import annotations

import argparse
import sys

HELP = "apply a workload of raytpu.yaml (RayJob or RayService) to a deployed stack, optionally waiting for it"

LOG_TAIL_LINES = 40


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds WORKLOAD and the stack, config, outputs, wait and dry-run options."""
    parser.add_argument("workload", metavar="WORKLOAD", help="a workload name from the config's workloads list")
    add_stack_arguments(parser)
    parser.add_argument("--wait", action="store_true", help="wait for the RayJob to finish (RayService: ready)")
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="how long --wait waits (default 3600)")


def add_stack_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared with ``raytpu smoke``."""
    from raytpu.outputs import DEFAULT_OUTPUTS

    parser.add_argument("--stack", required=True, help="the cluster stack's id in the outputs file "
                                                       "(<cluster name>-cluster, e.g. ray-tpu-cluster)")
    parser.add_argument("--config", default=None,
                        help="the config file (default: $RAYTPU_CONFIG, else raytpu.yaml)")
    parser.add_argument("--outputs", default=DEFAULT_OUTPUTS,
                        help=f"stack outputs: the file `cdktf deploy --outputs-file` wrote, or "
                             f"`terraform output -json` saved (default {DEFAULT_OUTPUTS})")
    parser.add_argument("--context", help="kubeconfig context (default: the one gcloud get-credentials names)")
    parser.add_argument("--py-modules", help="URI of the raytpu zip in the jobs' runtime env (default "
                                             "file:///mnt/gcs/raytpu/raytpu-<version>.zip: the bucket's "
                                             "gs://<bucket>/raytpu/raytpu-<version>.zip through GCS FUSE)")
    parser.add_argument("--upload-core", action="store_true",
                        help="zip the installed raytpu package and `gcloud storage cp` it to "
                             "gs://<bucket>/raytpu/raytpu-<version>.zip (or to --py-modules if that is gs://) "
                             "before applying (the cluster stack's deploy uploads it too; use this for a core "
                             "changed since)")
    parser.add_argument("--run-id", help="suffix of RayJob names (default: base-36 time)")
    parser.add_argument("--poll-s", type=float, default=10.0, help="status polling interval (default 10)")
    parser.add_argument("--dry-run", action="store_true", help="print the manifests as YAML; apply nothing")


def run(args: argparse.Namespace) -> int:
    """Builds, applies and (with --wait) follows the workload."""
    from raytpu import config as config_mod
    from raytpu import errors, gke, kuberay, report
    from raytpu.outputs import StackOutputs

    args.config = args.config or config_mod.default_path()
    spec = config_mod.load(args.config)
    work = spec.workload(args.workload)
    outputs = StackOutputs.read(args.outputs, args.stack)
    # every RayJob submission is a new run: its own name, and (train) its own checkpoint directory
    name = f"{work.name}-{args.run_id or gke.run_id()}" if work.kind.is_job else work.name
    manifest = kuberay.workload_manifest(spec, work, service_account=outputs.service_account,
                                         bucket=outputs.bucket, namespace=outputs.namespace,
                                         py_modules=args.py_modules, name=name,
                                         args=kuberay.train_args(outputs.bucket, name)
                                         if work.kind.name == "train" else ())
    if args.dry_run:
        print_yaml([manifest])
        return 0
    kubectl = gke.connect(outputs, args.context)
    if args.upload_core:
        gke.upload_core(gke.upload_target(args.py_modules, outputs.bucket))
    for line in kubectl.apply([manifest]):
        print(line, file=sys.stderr)
    kind = manifest["kind"]
    if not args.wait:
        hint = "rayservice" if kind == "RayService" else "rayjob"
        print(f"submitted {kind} {name}; follow with `kubectl -n {outputs.namespace} get {hint} {name} -w`")
        return 0
    if kind == "RayService":
        if gke.wait_for_service(kubectl, name, timeout_s=args.timeout_s, poll_s=args.poll_s):
            print(f"RayService {name} is ready (ClusterIP service {name}-serve-svc; "
                  f"`kubectl -n {outputs.namespace} port-forward svc/{name}-serve-svc 8000`)")
            return 0
        raise errors.RuntimeFailure(f"{name}: RayService not ready after {args.timeout_s:g}s; valid: check "
                                    f"`kubectl -n {outputs.namespace} describe rayservice {name}`")
    state = gke.wait_for_jobs(kubectl, [name], timeout_s=args.timeout_s, poll_s=args.poll_s)[name]
    log = kubectl.logs(f"job/{name}")
    if work.kind.name == "smoke":
        verdicts = report.parse_verdict_lines(log)
        print(report.render_table(verdicts))
        healthy = report.all_healthy(verdicts)
    else:
        print("\n".join(log.splitlines()[-LOG_TAIL_LINES:]))
        healthy = True
    if not state.done:
        raise errors.RuntimeFailure(f"{name}: still {state.describe()} after {args.timeout_s:g}s; valid: a larger "
                                    f"--timeout-s, or check `kubectl -n {outputs.namespace} describe rayjob {name}`")
    if not state.succeeded:
        raise errors.RuntimeFailure(f"{name}: RayJob ended {state.describe()}; valid: see "
                                    f"`kubectl -n {outputs.namespace} logs job/{name}`")
    if not healthy:
        raise errors.RuntimeFailure(f"{name}: smoke check found an unhealthy slice (or printed no verdict); "
                                    "valid: every slice healthy")
    print(f"RayJob {name}: {state.describe()}")
    return 0


def print_yaml(manifests: list[dict[str, object]]) -> None:
    """Prints manifests as a multi-document YAML stream (what --dry-run shows)."""
    import yaml

    print(yaml.safe_dump_all(manifests, sort_keys=False, width=120), end="")
