"""``raytpu validate [CONFIG]``: checks a raytpu.yaml and reports every problem with its field path."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from raytpu.core.specs.spec import ClusterSpec, SliceSpec, WorkloadSpec
    from raytpu.teamcode.prepared import TeamCode

HELP = "check a raytpu.yaml; every problem is reported with its field path"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the optional CONFIG path."""
    from raytpu.console import argtypes
    parser.add_argument("config", metavar="CONFIG", nargs="?", default=None, type=argtypes.path,
                        help="path of the config (default: $RAYTPU_CONFIG, else raytpu.yaml)")
    parser.add_argument("--overwrite", action="store_true",
                        help="accept a batch workload whose local output exists (its run will replace it)")
    parser.add_argument("--resolve", action="store_true",
                        help="also resolve each workload's requirements against the kit's image (needs the package "
                             "index; without it validate reads files only, offline)")


def run(args: argparse.Namespace) -> int:
    """Loads the config; prints a one-line summary per slice and workload when it is valid, then its warnings on
    stderr (:func:`raytpu.core.specs.spec_warnings.config_warnings`, with the model fit of :mod:`raytpu.sizing` and the
    driver check of :func:`raytpu.teamcode.checks.head_warnings`)."""
    from raytpu.config import choose, load
    from raytpu.core.specs.spec_warnings import config_warnings, served_copies
    from raytpu.core.tpu.catalog import RAY_VERSION

    args.config = choose(args.config)

    spec = load(args.config)
    from raytpu.core.common import errors
    from raytpu.core.specs.runtime import data
    from raytpu.images import team

    codes = team.prepare_all(spec, lock=False)  # every code folder walked once and checked
    errors.raise_found([p for i, w in enumerate(spec.workloads) if w.output is not None and w.input is not None
                        for p in (data.overlap_problems(w.input, w.output, f"workloads[{i}].output", resolve=True)
                                  or data.output_problems(f"workloads[{i}].output", w.output, args.overwrite))])
    if args.resolve:  # resolving needs the index: only on asking
        codes = team.lock_all(spec, codes)
    locks = lock_lines(codes)
    print(f"{args.config}: valid ({spec.cluster.mode} cluster {spec.cluster.name!r} in {spec.region}, "
          f"{len(spec.slices)} slice kind(s), {len(spec.workloads)} workload(s))")
    for item in spec.slices:
        plan = item.plan
        ray = "" if plan.ray_reservable else f"; Ray {RAY_VERSION} cannot reserve it (no workloads)"
        print(f"  {item.name}: {item.count} x {plan.generation} {plan.topology} = {plan.hosts} host(s) x "
              f"{plan.chips_per_host} chips ({plan.machine_type}), {item.provisioning.name}, {item.zone}{ray}"
              f"{disk_note(spec, item)}")
    stack = f"{spec.cluster.name}-cluster"
    held = served_copies(spec)
    for work in spec.workloads:
        how = ("a RayService the workloads stack applies" if not work.kind.is_job else
               f"a RayJob run by `raytpu submit {work.name} --stack {stack}` (Terraform applies no RayJob)")
        if work.serve_app is not None:
            how = (f"a RayService of its own Serve app {work.serve_app}, applied by `raytpu submit {work.name} "
                   f"--stack {stack}` (it uploads the code zip; the workloads stack applies none)")
        if work.kind.is_job and work.slice.name in held:
            how = f"a RayJob that cannot run beside {held[work.slice.name]} (see the warning)"
        span = f" ({work.slices_per_run} slices per run, joined over DCN)" if work.multislice else ""
        lock = f"; {locks[work.name]}" if work.name in locks else ""
        print(f"  {work.name}: {work.kind.name} on {work.slice.name}{span}, {how}{runs(work)}{kept(work)}{lock}")
    from raytpu.sizing.serving_fit import fit_warnings
    from raytpu.teamcode.checks import head_warnings

    for line in config_warnings(spec, fit=lambda _prefix, work: fit_warnings(work), head=head_warnings):
        print(f"warning: {line}", file=sys.stderr)
    return 0


def lock_lines(codes: Mapping[str, TeamCode]) -> dict[str, str]:
    """``--resolve``: workload -> its lock's line (the locks were worked out by :func:`raytpu.images.team.prepare_all`:
    every problem together, exit 2 for a line no index serves or a clash, 1 when the index is unreachable)."""
    from raytpu.images.team import name_of

    return {name: f"lock {name_of(code.lock)}: {len(code.lock.extras)} package(s) beyond the kit's image"
            for name, code in codes.items() if code.lock is not None}


def runs(work: WorkloadSpec) -> str:
    """What a job workload runs: the team's code (from its folder or image) or the kit's own trainer."""
    where = f"from {work.code}" if work.code else "from its image" if work.image else ""
    if work.train_loop:
        return f"; runs {work.train_loop} {where} in the kit's JaxTrainer".rstrip()
    if work.kind.runs_entrypoint and work.on_every_host:
        hosts = work.plan.hosts * work.slices_per_run
        return f"; runs `{work.entrypoint}` {where} once on each of its {hosts} TPU host(s)".replace("  ", " ")
    if work.kind.runs_entrypoint:
        return f"; runs `{work.entrypoint}` {where} as a Ray driver on the head".rstrip()
    return "; runs the kit's own demo trainer (no train_loop)" if work.kind.trains else ""


def kept(work: WorkloadSpec) -> str:
    """How many checkpoints a training run keeps (issue 49: it was 2, silently; Ray's default keeps all)."""
    from raytpu.core.specs.runtime import checkpoints

    return f"; {checkpoints.described(work.keep_checkpoints)}" if work.kind.name in checkpoints.CHECKPOINTING_KINDS \
        else ""


def disk_note(spec: ClusterSpec, item: SliceSpec) -> str:
    """On Standard, a boot disk the kit sized above the default for the weights of the slice's engines."""
    from raytpu.core.specs.field_rules import DEFAULT_DISK_SIZE_GIB
    from raytpu.core.specs.serving import node_disk

    if spec.cluster.autopilot or item.disk_size_gib is not None:
        return ""
    size = node_disk.boot_disk_gib(item, spec.workloads, spec.bucket)
    need = node_disk.slice_need(item, spec.workloads, spec.bucket)
    if size == DEFAULT_DISK_SIZE_GIB or need is None:
        return ""
    return (f", boot disk {size} GiB per host (room for {need.model}'s {need.weights_gib:,.1f} GiB of weights, which "
            f"workload {need.workload} downloads to every host)")
