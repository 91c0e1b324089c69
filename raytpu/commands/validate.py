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
    """Loads the config; prints a one-line summary per slice when it is valid, and a warning (stderr) for every
    ``security`` setting that opens something to the outside, every slice in a zone Google does not document for
    it, every job whose driver entrypoint never imports ray (:func:`raytpu.teamcode.checks.head_warnings`), and every
    ``env`` name that looks like a secret's (:func:`raytpu.core.specs.run_env.secret_like_warnings`)."""
    from raytpu.config import choose, load
    from raytpu.core.tpu.catalog import RAY_VERSION

    args.config = choose(args.config)

    spec = load(args.config)
    from raytpu.core.common import errors
    from raytpu.core.specs import data
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
    for warning in spec.security.warnings():
        print(f"warning: {warning}", file=sys.stderr)
    for i, item in enumerate(spec.slices):
        for line in zone_warnings(item):
            print(f"warning: slices[{i}].zone: {line}", file=sys.stderr)
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
    from raytpu.core.specs.run_env import secret_like_warnings
    from raytpu.teamcode.checks import head_warnings
    for work in spec.workloads:
        for line in [*fit_warnings(work), *serving_warnings(spec, work), *deadline_warnings(work),
                     *disk_warnings(spec, work), *head_warnings(codes[work.name].field, work),
                     *secret_like_warnings(codes[work.name].field, work.env)]:
            print(f"warning: {line}", file=sys.stderr)
        if work.kind.is_job and work.slice.name in held:
            print(f"warning: workloads.{work.name}: every copy of slice {work.slice.name} is held by "
                  f"{held[work.slice.name]}; its RayJob's pods would stay Pending (google.com/tpu is an extended "
                  "resource: a chip is never shared), so `raytpu submit` refuses while they hold it; give the job "
                  "its own slice, or run `raytpu smoke`, which skips held copies as busy", file=sys.stderr)
    from raytpu.core.specs.grants import path_warnings
    for line in path_warnings(spec):
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
    from raytpu.core.specs import checkpoints

    return f"; {checkpoints.described(work.keep_checkpoints)}" if work.kind.name in checkpoints.CHECKPOINTING_KINDS \
        else ""


def zone_warnings(item: SliceSpec) -> list[str]:
    """Where Google does not document the slice's generation (or, flex-start, its generation under flex-start) in
    the slice's zone: :data:`raytpu.core.tpu.catalog.OFFERED`. A warning, not an error: the lists move (see there)."""
    from raytpu.core.tpu.catalog import OFFERED

    return OFFERED.warnings(item.plan.generation, _modes(item), item.zone)


def _modes(item: SliceSpec) -> tuple[str, ...]:
    """The provisioning modes a slice may run on: its own, then its fallbacks."""
    return (item.provisioning.name, *(m.name for m in item.fallback))


def served_copies(spec: ClusterSpec) -> dict[str, str]:
    """Slices whose every copy a RayService holds (its workers request all their hosts' chips for as long as it
    runs), with the services that hold them. A RayService spans all copies of its slice, or ``slices`` of them."""
    holders: dict[str, list[str]] = {}
    copies: dict[str, int] = {}
    for work in spec.workloads:
        if not work.kind.is_job:
            holders.setdefault(work.slice.name, []).append(f"RayService {work.name!r}")
            copies[work.slice.name] = copies.get(work.slice.name, 0) + work.slices_spanned
    return {name: ", ".join(who) for name, who in holders.items() if copies[name] >= spec.slice_named(name).count}


def serving_warnings(spec: ClusterSpec, work: WorkloadSpec) -> list[str]:
    """A RayService where it would go down: on flex-start capacity or a slice with a run duration, which GKE takes
    back then. (Weights in a bucket no grant covers: :func:`raytpu.core.specs.grants.path_warnings`.)"""
    from raytpu.core.specs.provisioning import MAX_RUN_DURATION_S

    if work.kind.is_job:
        return []
    out = []
    item = work.slice
    if "flex-start" in _modes(item):
        # Source: https://cloud.google.com/kubernetes-engine/docs/concepts/dws (flex-start nodes run at most 7 days)
        ends = item.max_run_duration_s or MAX_RUN_DURATION_S[1]
        out.append(f"workloads.{work.name}: serves from slice {item.name}, which may run on flex-start capacity: GKE "
                   f"deletes flex-start nodes when their run duration ends ({ends} s), so the RayService goes down "
                   "and waits for new capacity; serve from on-demand, spot or a reservation")
    elif item.max_run_duration_s is not None:
        out.append(f"workloads.{work.name}: serves from slice {item.name}, whose nodes end at its max_run_duration_s "
                   f"({item.max_run_duration_s} s), so the RayService goes down then and waits for new nodes; "
                   f"remove max_run_duration_s from slice {item.name} for a long-lived service")
    return out


def deadline_warnings(work: WorkloadSpec) -> list[str]:
    """A RayJob whose deadline (``activeDeadlineSeconds``) outlasts its flex-start slice's ``max_run_duration_s``:
    GKE deletes the nodes at the run duration, so a job that takes its time is cut before its deadline.
    Source: https://cloud.google.com/kubernetes-engine/docs/concepts/dws (nodes removed at maxRunDurationSeconds)."""
    item, run_s = work.slice, work.run_deadline_s
    ends = item.max_run_duration_s
    if not work.kind.is_job or ends is None or "flex-start" not in _modes(item):
        return []
    if run_s is not None and run_s <= ends:
        return []
    runs = f"{run_s} s (activeDeadlineSeconds) or more" if run_s else "with no deadline (run_time_s: unlimited)"
    return [f"workloads.{work.name}: its RayJob may run {runs} once its slice is up, past slice {item.name}'s "
            f"flex-start max_run_duration_s {ends}: GKE deletes the nodes at {ends} s and cuts the job; raise "
            f"slices[].max_run_duration_s to at least {run_s or 'its run time'}, or run it on on-demand, spot or a "
            "reservation"]


def disk_note(spec: ClusterSpec, item: SliceSpec) -> str:
    """On Standard, a boot disk the kit sized above the default for the weights of the slice's engines."""
    from raytpu.core.specs import node_disk
    from raytpu.core.specs.field_rules import DEFAULT_DISK_SIZE_GIB

    if spec.cluster.autopilot or item.disk_size_gib is not None:
        return ""
    size = node_disk.boot_disk_gib(item, spec.workloads, spec.bucket)
    need = node_disk.slice_need(item, spec.workloads, spec.bucket)
    if size == DEFAULT_DISK_SIZE_GIB or need is None:
        return ""
    return (f", boot disk {size} GiB per host (room for {need.model}'s {need.weights_gib:,.1f} GiB of weights, which "
            f"workload {need.workload} downloads to every host)")


def disk_warnings(spec: ClusterSpec, work: WorkloadSpec) -> list[str]:
    """On Autopilot, an engine whose ephemeral-storage request is more than a default Standard node would hold:
    GKE refuses a request above its maximum, which the sources the kit read do not state for TPU pods."""
    from raytpu.core.specs import node_disk
    from raytpu.core.specs.field_rules import DEFAULT_DISK_SIZE_GIB

    need = node_disk.engine_disk(work, spec.bucket)
    if not spec.cluster.autopilot or need is None or need.need_gib <= node_disk.allocatable_gib(DEFAULT_DISK_SIZE_GIB):
        return []
    fix = "" if need.batch else f"; or serve it from gs://{spec.bucket}/PATH (read in place, no download)"
    return [f"workloads.{work.name}: its TPU pods request {need.request} of ephemeral storage ({need.model}'s "
            f"{need.weights_gib:,.1f} GiB of weights, downloaded to every host, + Ray's files); Autopilot refuses a "
            "request above its maximum for the pod's hardware, which the kit could not find stated for TPU pods: if "
            f"GKE refuses the pods, run the workload on a Standard cluster, whose boot disk the kit sizes{fix}"]


def fit_warnings(work: WorkloadSpec) -> list[str]:
    """A serving workload whose model cannot fit its slice (weights + KV cache for one sequence of its
    ``max_model_len``, bf16, 10% headroom: :mod:`raytpu.sizing.memory`); only models of ``raytpu plan``'s built-in
    table are known here, so another model gets a note saying it was not checked. A warning, not an error: a
    quantized checkpoint may fit where the estimate says no."""
    from raytpu.core.specs import vllm_rules
    from raytpu.core.tpu import models
    from raytpu.sizing import candidates, memory

    if not work.runs_vllm:
        return []
    name, plan = work.name, work.plan
    source = vllm_rules.sized_model(work.model, work.model_source)
    shape = models.by_hf_id(source)
    if shape is None:
        return [f"workloads.{name}: model {source!r} is not in `raytpu plan`'s built-in table, so its fit on "
                f"{plan.generation} {plan.topology} was not checked (run `raytpu plan --model-config config.json`), "
                "nor the room its weights need on each host's disk (slices[].disk_size_gib; "
                "`raytpu plan --model-config config.json --mode serve` prints the disk that holds them)"]
    context = work.max_model_len or vllm_rules.DEFAULT_MAX_MODEL_LEN
    need = memory.serve_need(shape.params(), shape, dtype="bf16", kv_dtype="bf16", context=context, batch=1,
                             tensor_parallel=candidates.layout(plan, shape).tensor_parallel)
    usable = plan.chips * plan.hbm_gib_per_chip * memory.GIB * (1 - memory.DEFAULT_HEADROOM)
    if need.total <= usable:
        return []
    return [f"workloads.{name}: {shape.name} needs {need.total / memory.GIB:,.1f} GiB in bf16 (weights + KV cache "
            f"for one {context}-token sequence), more than the {usable / memory.GIB:,.1f} GiB usable on "
            f"{plan.generation} {plan.topology} ({plan.chips} x {plan.hbm_gib_per_chip:g} GiB, 10% kept free); "
            f"`raytpu plan --model {shape.name}` lists the slices that fit"]
