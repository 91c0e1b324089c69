"""``raytpu smoke --stack NAME``: the nightly check of every TPU slice of a deployed stack.

One single-slice smoke RayJob per slice copy (``count`` jobs per config slice,
:func:`raytpu.kuberay.smoke_jobs`), applied with ``kubectl apply -f -``; the jobs are polled together
(progress on stderr) up to ``--timeout-s``; each job's driver log (``kubectl logs job/<name>``, the
K8sJobMode submitter) is searched for its ``RAYTPU_SMOKE_VERDICT`` line. A job that failed, timed out
or printed no verdict counts as an unhealthy slice. The table goes to stdout, ``smoke.json`` and
``smoke.junit.xml`` to ``--report`` (default ``reports/``). Exit 0 when every slice is healthy, 1 when
one is not, 2 on bad input. Slices with queued provisioning are skipped with a warning (a RayJob with
workers cannot use queued capacity).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from raytpu.plan import SlicePlan

HELP = "run the smoke check on every slice of a deployed stack; JSON + JUnit report; exit 1 if one is unhealthy"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the stack options, ``--report``, ``--timeout-s`` and ``--image``."""
    from raytpu.commands.submit import add_stack_arguments

    add_stack_arguments(parser)
    parser.add_argument("--report", default="reports", help="directory for smoke.json and smoke.junit.xml "
                                                            "(default reports)")
    parser.add_argument("--timeout-s", type=float, default=1800.0,
                        help="how long to wait for all smoke jobs (default 1800)")
    parser.add_argument("--image", help="image of the smoke jobs (default: the config's smoke workload image)")


def failed_verdict(job: dict[str, Any], plan: SlicePlan, problem: str) -> dict[str, Any]:
    """The verdict of a job that gave none: unhealthy, with ``problem`` as its one failed check."""
    return {
        "slice": job["metadata"]["name"], "job": job["metadata"]["name"], "healthy": False,
        "generation": plan.generation, "topology": plan.topology, "pod_type": plan.ray_pod_type,
        "hosts_expected": plan.hosts, "hosts_found": 0, "duration_s": 0.0,
        "checks": [{"name": "job", "ok": False, "detail": problem, "value": None, "expected": None}],
        "hosts": [],
    }


def run(args: argparse.Namespace) -> int:
    """Applies the smoke jobs, waits, collects verdicts, prints the table and writes the reports."""
    from raytpu import config as config_mod
    from raytpu import errors, gke, kuberay, report
    from raytpu.commands.submit import print_yaml
    from raytpu.outputs import StackOutputs

    spec = config_mod.load(args.config)
    outputs = StackOutputs.read(args.outputs, args.stack)
    suffix = args.run_id or gke.run_id()
    jobs = kuberay.smoke_jobs(spec, service_account=outputs.service_account, bucket=outputs.bucket,
                              namespace=outputs.namespace, py_modules=args.py_modules, image=args.image,
                              suffix=suffix)
    skipped = [s.name for s in spec.slices if not s.provisioning.runs_ray]
    for name in skipped:
        print(f"warning: slice {name}: skipped ({spec.slice(name).provisioning.name} provisioning cannot run a "
              "RayJob with workers)", file=sys.stderr)
    if not jobs:
        raise errors.InvalidInput("slices", "no slice can run a smoke RayJob",
                                  "at least one slice whose provisioning runs a Ray cluster")
    if args.dry_run:
        print_yaml(jobs)
        return 0
    kubectl = gke.connect(outputs, args.context)
    if args.upload_core:
        gke.upload_core(gke.upload_target(args.py_modules, outputs.bucket))
    started = time.monotonic()
    for line in kubectl.apply(jobs):
        print(line, file=sys.stderr)
    names = [j["metadata"]["name"] for j in jobs]
    states = gke.wait_for_jobs(kubectl, names, timeout_s=args.timeout_s, poll_s=args.poll_s)
    verdicts: list[dict[str, Any]] = []
    for job in jobs:
        name = job["metadata"]["name"]
        state = states[name]
        found = report.parse_verdict_lines(kubectl.logs(f"job/{name}"))
        if not found:
            why = (f"no {report.MARKER} line in the job's log; RayJob {state.describe()}" if state.done
                   else f"timed out after {args.timeout_s:g}s; RayJob {state.describe()}")
            plan = spec.slice(job["metadata"]["labels"][kuberay.SLICE_LABEL]).plan
            found = [failed_verdict(job, plan, why)]
        elif not state.succeeded:
            for v in found:
                v["healthy"] = False
                v.setdefault("checks", []).append({"name": "job", "ok": False, "value": None, "expected": None,
                                                   "detail": f"RayJob ended {state.describe()}"})
        for v in found:
            v.setdefault("job", name)
        verdicts.extend(found)
    print(report.render_table(verdicts))
    try:
        json_path, junit_path = report.write_reports(verdicts, args.report, extra={
            "stack": args.stack, "cluster": outputs.cluster_name, "run_id": suffix, "skipped_slices": skipped,
            "wall_s": round(time.monotonic() - started, 1)})
    except OSError as exc:
        raise errors.RuntimeFailure(f"--report: cannot write {args.report!r} ({exc.strerror}); valid: a writable "
                                    "directory") from None
    print(f"reports: {json_path} {junit_path}", file=sys.stderr)
    if not report.all_healthy(verdicts):
        bad = [str(v.get("job") or v.get("slice")) for v in verdicts if not v.get("healthy")]
        raise errors.RuntimeFailure(f"smoke: {len(bad)} of {len(verdicts)} slices unhealthy ({', '.join(bad)}); "
                                    f"valid: every slice healthy (details in {json_path})")
    return 0
