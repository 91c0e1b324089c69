"""``raytpu submit WORKLOAD --stack NAME``: run one workload of ``raytpu.yaml`` on a deployed stack (or, with
``--local``, on the emulated slice).

The workload's KubeRay object (:func:`raytpu.core.manifests.kuberay.workload_manifest`) is built from the config's spec
and the stack outputs (endpoint, CA, namespace, KSA, bucket; :class:`raytpu.cluster.outputs.StackOutputs`) and
server-side applied through the Kubernetes API with Application Default Credentials (:mod:`raytpu.cluster.gke`):
no kubectl, no gcloud. RayJobs get a run suffix (``train-t5x2kq``) so every submission is a new run with its
own checkpoint directory (train: ``--name`` is that name, under the bucket's GCS FUSE mount,
:meth:`raytpu.core.specs.kinds.WorkloadKind.run_args`); a RayService keeps its name (applying again updates it).
``--wait`` follows the job to its end (progress on stderr, the submitter's log streamed to stdout) and exits with its
result; for a RayService it waits until it serves and prints the endpoint. Exit 0 on success, 1 when the job failed,
timed out or a slice is unhealthy, 2 on bad input (unknown workload, missing outputs).

``--local`` submits the same program, with the same spec in ``RAYTPU_WORKLOAD``, to the running emulated slice
(``raytpu local up``) through Ray's Job Submission API and follows it the same way; a ``batch`` workload there needs
``--cpu-model PATH`` (its engine's CPU twin) and replaces an existing ``output`` only with ``--overwrite``. A serving
workload (the kit's LLM app or a team's ``serve_app``) is deployed there as ``raytpu local serve --workload NAME``
deploys it, and serves until ``raytpu local down``. The command chooses its side once
(:func:`raytpu.console.sides.side_for`) and speaks :class:`raytpu.runs.side.Side` from then on.
"""

from __future__ import annotations

import argparse

HELP = "apply a workload of raytpu.yaml (RayJob or RayService) to a deployed stack, optionally waiting for it"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds WORKLOAD and the stack, config, outputs, wait and dry-run options."""
    from raytpu.console import argtypes
    from raytpu.console.cli_args import add_api_key_file, add_stack_arguments

    parser.add_argument("workload", metavar="WORKLOAD", help="a workload name from the config's workloads list")
    add_stack_arguments(parser, stack_note="; required unless --local")
    parser.add_argument("--wait", action="store_true", help="wait for the RayJob to finish (RayService: ready)")
    parser.add_argument("--timeout-s", type=argtypes.positive_seconds, default=None,
                        help="how long --wait waits (default 3600); with --local, a serving workload: how long its "
                             "deploy may take (default 420)")
    parser.add_argument("--local", action="store_true",
                        help="run it on the emulated slice (`raytpu local up`) through Ray's Job Submission API "
                             "and follow it, or deploy a serving workload there as `raytpu local serve --workload "
                             "NAME` does; not with --stack, --dry-run or --py-modules (--outputs is not read)")
    parser.add_argument("--dir", default=None, type=argtypes.path,
                        help="with --local: the local cluster's run directory")
    parser.add_argument("--report", default=None, type=argtypes.path, metavar="FILE",
                        help="with --wait: also write the run's timeline (where the minutes went) as JSON to FILE")
    parser.add_argument("--cpu-model", default=None, type=argtypes.path, metavar="PATH",
                        help="with --local, a batch workload (required): run its engine's CPU twin with the model "
                             "folder at PATH (e.g. the tiny model `python -m raytpu.workloads.tiny_llm` prints)")
    parser.add_argument("--set", action="append", default=None, dest="overrides", metavar="KEY=VALUE",
                        help="change a field of this workload for this run only (repeatable; a YAML scalar), e.g. "
                             "--set train_config.d_model=256 --set train_config.steps=20; every rule of the file "
                             "applies")
    parser.add_argument("--overwrite", action="store_true",
                        help="with --local, a batch workload: replace its output when it exists")
    add_api_key_file(parser, when="with --local, a serving workload: ")
    parser.add_argument("--replace", action="store_true",
                        help="a serve workload whose Ray cluster spec changed: delete the running RayService and "
                             "apply it anew (KubeRay applies no cluster change to a running one; the endpoint is "
                             "down until the new one serves)")


def run(args: argparse.Namespace) -> int:
    """Chooses the side once (:func:`raytpu.console.sides.side_for`: a stack, :class:`raytpu.cluster.side.ClusterSide`;
    ``--local``, :class:`raytpu.local.running.side.LocalSide`), then builds, applies and follows the workload there."""
    import os
    import sys

    from raytpu import config as config_mod
    from raytpu.config import overrides
    from raytpu.console.sides import side_for
    from raytpu.core.common import errors
    from raytpu.runs.side import SubmitRequest

    # --wait with --local is what it does anyway (a local run is always followed): the same command in both places
    stack_only = [errors.InvalidInput(flag, "cannot go with --local", f"{flag} or --local, not both")
                  for flag, given in (("--stack", bool(args.stack)), ("--dry-run", args.dry_run),
                                      ("--py-modules", args.py_modules is not None)) if given]
    local_only = [errors.InvalidInput(flag, f"is for {what}", f"{flag} with --local")
                  for flag, given, what in (("--cpu-model", args.cpu_model is not None, BATCH),
                                            ("--overwrite", args.overwrite, BATCH),
                                            ("--api-key-file", args.api_key_file is not None, SERVING)) if given]
    side = side_for(args, args.local, with_local=stack_only, without_local=local_only)
    # --local falls back to the example as `local` does, and says so; a present raytpu.yaml goes unsaid, as for GCP
    plain = os.path.exists(config_mod.DEFAULT_CONFIG) and not os.environ.get(config_mod.CONFIG_ENV)
    args.config = config_mod.choose(args.config, local=side.example_config, announce=not plain)
    given = tuple(args.overrides or ())
    spec = config_mod.load(args.config, workload=args.workload, overrides=given)
    work = spec.workload(args.workload)
    from raytpu.images import team
    from raytpu.teamcode.prepared import field_of

    with overrides.naming(field_of(spec, work.name), given):  # its folder walked, its lock worked out: once
        code = team.prepare(spec, work)
    overridden = overrides.summary(given) if given else None
    if (args.report is not None and not (args.wait or side.always_followed)) or args.report == "":
        raise errors.invalid_value("--report", args.report, "is the timeline of a run that is followed",
                                   "a file path, with --wait or --local")
    if args.report is not None:  # checked before the run, not after it (issue 68 item 1)
        from raytpu.console.machine import output_file_problems

        errors.raise_found(output_file_problems("--report", args.report))
    from raytpu.console.followed_run import streams
    from raytpu.teamcode.checks import head_warnings

    for line in head_warnings(code.field, work):  # validate's, said before the run
        print(f"warning: {line}", file=sys.stderr)
    request = SubmitRequest(spec, args.config, code, run_id=args.run_id, wait=args.wait, timeout_s=args.timeout_s,
                            report=args.report, overridden=overridden, py_modules=args.py_modules,
                            upload_core=args.upload_core, replace=args.replace, cpu_model=args.cpu_model,
                            overwrite=args.overwrite, api_key_file=args.api_key_file)
    try:
        if args.dry_run:
            from raytpu.console.cli_args import print_yaml

            shown = side.preview(work, request)
            print(shown.header, end="")
            if shown.note:
                print(shown.note, file=sys.stderr)
            print_yaml(shown.manifests)
            return 0
        return side.submit(work, request, streams(args.report, overridden))
    finally:
        side.close()


BATCH = "a batch workload run on the emulated slice"
SERVING = "a serving workload deployed on the emulated slice"
