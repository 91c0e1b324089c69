"""``raytpu images build [IMAGE...] --stack NAME``: build the kit's images with Cloud Build on a deployed stack and
record their digests.

Each image (:data:`raytpu.images.definitions.IMAGES`; by default every one a workload of the config runs, then the
image of each workload's requirements lock, ``team-<hash>``: :mod:`raytpu.images.team`; an ``IMAGE`` may name one of
those, built FROM the job image as recorded or as built by the same command) is built by
Cloud Build in the stack's region from the installed kit's definition and pushed to the stack's Artifact Registry
repository (:mod:`raytpu.images.build` says why the kit calls the API instead of owning a trigger). Progress goes to
stderr, the build log to stdout; once an image is built, its digest is recorded in ``raytpu.images.json`` beside the
config (:mod:`raytpu.images.record`) with the base it was built FROM (by the digest the build resolved), where
the manifest builders read it (``load_refs``); at the end a table (stderr) shows what each image now runs. Exit 0
when every image built, 1 when a build failed or an API refused (the line names the role), 2 on bad input (an
unknown image, one no workload of the config runs, a malformed ``base_digest``, a stack without the registry
outputs), before anything is uploaded.

``raytpu images list [--json]``: what the record beside the config holds (each kit image, built or
``<not built: ...>``) and which image each workload of the config runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from raytpu.console import argtypes

if TYPE_CHECKING:

    from raytpu.images import record

HELP = ("build the kit's container images with Cloud Build on a deployed stack and record their digests; list "
        "what is recorded")

BUILD_TIMEOUT_S = argtypes.WholeNumber(60, 24 * 3600, "seconds", "is outside Cloud Build's build timeout range")
"""``--timeout-s``, a build's ``timeout``, at most 24 hours.
Source: https://cloud.google.com/build/docs/build-config-file-schema (timeout)"""

POLL_MAX_S = 600.0
"""The longest ``--poll-s``: a build polled less often than every 10 minutes looks hung."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the ``build`` and ``list`` actions and their options."""
    from raytpu.cluster.outputs import DEFAULT_OUTPUTS

    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    build = actions.add_parser("build", help="build and push images, record their digests beside the config")
    build.add_argument("images", nargs="*", metavar="IMAGE",
                       help="images to build (default: every image a workload of the config runs, then each "
                            "workload requirements lock's team-<hash>, named by `raytpu images list`)")
    build.add_argument("--stack", required=True, help="the cluster stack's id in the outputs file "
                                                      "(<cluster name>-cluster, e.g. ray-tpu-cluster)")
    build.add_argument("--config", default=None, type=argtypes.path,
                       help="the config file (default: $RAYTPU_CONFIG, else raytpu.yaml); the record is written "
                            "beside it")
    build.add_argument("--outputs", default=DEFAULT_OUTPUTS, type=argtypes.path,
                       help=f"stack outputs: the file `cdktf deploy --outputs-file` wrote (default {DEFAULT_OUTPUTS})")
    build.add_argument("--timeout-s", type=BUILD_TIMEOUT_S, default=3600, help="the build's timeout (default 3600)")
    build.add_argument("--poll-s", type=argtypes.Seconds(POLL_MAX_S), default=3.0,
                       help="seconds between status polls (default 3)")
    listing = actions.add_parser("list", help="what raytpu.images.json records, and the image each workload runs")
    listing.add_argument("--config", default=None, type=argtypes.path, help="the config file (default: "
                         "$RAYTPU_CONFIG, else raytpu.yaml); the record is read beside it")
    listing.add_argument("--json", action="store_true", help="print it as JSON")


def run(args: argparse.Namespace) -> int:
    """``build`` (:func:`build`) or ``list`` (:func:`list_images`)."""
    return list_images(args) if args.action == "list" else build(args)


def list_images(args: argparse.Namespace) -> int:
    """Prints the kit's images (built or not, from the record beside the config) and the image each workload
    of the config runs: a table, or with ``--json`` ``{config, record, images, workloads}``."""
    import json

    from raytpu import config as config_mod
    from raytpu import images
    from raytpu.images import record
    from raytpu.images.definitions import IMAGES

    args.config = config_mod.choose(args.config)
    spec = config_mod.load(args.config)
    from raytpu.images import team

    codes = team.prepare_all(spec, lock=True)  # each workload's folder walked and its lock worked out once
    built = record.load(args.config)
    kit = {name: {"built": name in built, "kinds": list(IMAGES[name].kinds),
                  **(built[name].to_json() if name in built else {"ref": None})} for name in IMAGES}
    runs: list[dict[str, Any]] = []
    for work in spec.workloads:
        own = work.image is not None
        name = None if own else (team.image_name(codes[work.name]) if work.requirements is not None
                                 else images.image_of(work).name)
        old = not own and name in built and record.stale(str(name), built[str(name)], built)
        reference = work.image if own else (built[name].ref if name in built and not old else None)
        runs.append({"workload": work.name, "kind": work.kind.name, "image": name or "(its own)",
                     "reference": reference, "built": own or (name in built and not old),
                     **({"stale": "built on an earlier job image: raytpu images build builds it again"}
                        if old else {})})
    if args.json:
        print(json.dumps({"config": args.config, "record": str(record.record_path(args.config)), "images": kit,
                          "workloads": runs}, indent=2))
        return 0
    print(_table(("image", "kinds", "ref", "build"),
                 [(n, ",".join(i["kinds"]), i["ref"] or images.NOT_BUILT, i.get("build") or "-")
                  for n, i in kit.items()]))
    print()
    print(_table(("workload", "kind", "image", "runs"),
                 [(r["workload"], r["kind"], r["image"], r["reference"] or images.NOT_BUILT) for r in runs]))
    return 0


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """Rows under ``header``, columns left-aligned."""
    every = [header, *rows]
    widths = [max(len(r[i]) for r in every) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in every)


def build(args: argparse.Namespace) -> int:
    """Checks every input, then builds the images one after another, recording each as it succeeds."""
    from raytpu import config as config_mod
    from raytpu.cluster.google_api import GoogleApi
    from raytpu.cluster.outputs import StackOutputs
    from raytpu.core.common import errors
    from raytpu.images import record, team
    from raytpu.images.build import ImageBuild, Target
    from raytpu.images.definitions import DIGEST, IMAGES

    args.config = config_mod.choose(args.config)
    spec = config_mod.load(args.config)
    locks = team.config_locks(team.prepare_all(spec, lock=True).values())  # each folder walked and locked once
    asked_team = [n for n in dict.fromkeys(args.images) if n in locks]
    asked_kit = [n for n in args.images if n not in locks]
    names = chosen_images(asked_kit, {w.kind.name for w in spec.workloads}, args.config, sorted(locks)) \
        if asked_kit or not args.images else []
    if asked_team and team.BASE_IMAGE not in names and team.BASE_IMAGE not in record.load_refs(args.config):
        raise errors.missing(f"image {team.BASE_IMAGE}", f"to layer {asked_team[0]} on",
                             f"`raytpu images build {team.BASE_IMAGE} {' '.join(asked_team)} --stack {args.stack}` "
                             "(the job image first, in the same command)")
    outputs = StackOutputs.read(args.outputs, args.stack, spec, args.config)
    for output in ("registry", "builder_service_account"):
        if not getattr(outputs, output):
            raise errors.missing(f"outputs.{output}", f"in {args.outputs} for stack {args.stack!r} to build images",
                                 "the outputs of a cluster stack deployed by this version of raytpu (it creates "
                                 "the image registry): `npx cdktf deploy '*-cluster' --outputs-file ...` again")
    errors.raise_found([errors.invalid_value(f"{IMAGES[n].context / 'versions.toml'}: base_digest",
                                             IMAGES[n].base_digest, "is not a digest",
                                             "sha256:<64 lowercase hex digits>, or empty")
                        for n in names if IMAGES[n].base_digest and not DIGEST.match(IMAGES[n].base_digest or "")])
    record.load(args.config)  # a malformed record is exit 2 before anything is built, not after
    target = Target(project=outputs.project, location=outputs.location, registry=outputs.registry,
                    bucket=outputs.bucket, builder=outputs.builder_service_account)
    api = GoogleApi()
    built: dict[str, record.BuiltImage] = {}
    for name in names:
        built[name] = ImageBuild(api, IMAGES[name], target, timeout_s=args.timeout_s, poll_s=args.poll_s).run()
        path = record.save(args.config, name, built[name])
        print(f"recorded {name}: {built[name].ref} in {path}", file=sys.stderr)
    if not args.images or asked_team:  # then one image per requirements lock, on the job image as recorded
        for name, definition in team.config_definitions(locks, args.config, args.stack).items():
            if asked_team and name not in asked_team:
                continue
            if not asked_team and (name in built or name in record.load_refs(args.config, outputs.registry)):
                print(f"image {name}: built already on the current job image (its lock's hash names it)",
                      file=sys.stderr)
                continue
            built[name] = ImageBuild(api, definition, target, timeout_s=args.timeout_s, poll_s=args.poll_s).run()
            path = record.save(args.config, name, built[name])
            print(f"recorded {name}: {built[name].ref} in {path}", file=sys.stderr)
    print(record.versions_table(built), file=sys.stderr)
    return 0


def chosen_images(asked: list[str], kinds: set[str], config: str, team: list[str] | None = None) -> list[str]:
    """The kit's images to build: those ``asked``, else every image a workload kind of the config runs (``team``:
    the config's team images, also valid names, listed when a name is unknown).

    Raises:
        InvalidInputs: an unknown image (the valid ones listed), an image whose definition names a kind the kit
            does not have, or one that no workload of the config runs (the ones that it runs listed).
    """
    from raytpu.core.common import errors
    from raytpu.core.specs.kinds import NAMES
    from raytpu.images.definitions import IMAGES

    found = [errors.invalid_value(f"images.{name}.kinds", list(image.kinds), "names no workload kind of the kit",
                                  ", ".join(NAMES))
             for name, image in IMAGES.items() if not image.kinds or not set(image.kinds) <= set(NAMES)]
    used = [name for name, image in IMAGES.items() if kinds & set(image.kinds)]
    for name in asked:
        if name not in IMAGES:
            found.append(errors.invalid_choice("IMAGE", name, [*sorted(IMAGES), *(team or [])],
                                               " (the kit's images" + (", then the config's team images)"
                                                                       if team else ")")))
        elif name not in used:
            found.append(errors.invalid_value(
                "IMAGE", name, f"is run by no workload of {config} (it runs kinds {', '.join(IMAGES[name].kinds)}; "
                f"the config's workloads are of kinds {', '.join(sorted(kinds)) or 'none'})",
                ", ".join(used) or "none: add a workload to the config first"))
    if not asked and not used:
        found.append(errors.missing("IMAGE", f"(no workload of {config} runs one of the kit's images)",
                                    f"an image its workloads run: add a workload of kind "
                                    f"{', '.join(sorted({k for i in IMAGES.values() for k in i.kinds}))}"))
    errors.raise_found(found)
    return list(dict.fromkeys(asked)) or used
