"""``raytpu synth [CONFIG] [--out DIR]``: the CDK app ``cdktf synth`` runs, without the node CLI.

Writes ``DIR/stacks/<stack>/cdk.tf.json`` (default ``cdktf.out``) for the cluster and workloads stacks
of CONFIG (default ``raytpu.yaml``), and the marker ``DIR/.raytpu-synth``. DIR must be absent, empty or a
previous synth output (:mod:`raytpu.stacks.synth_out`), checked before the config and the slow CDK Terrain import.
The app is synthesized into a folder beside DIR and swapped in only when it is complete, so a bad config or
a failing construct leaves DIR as it was. Progress goes to stderr; stdout gets one line per stack file written.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HELP = "synthesize the Terraform JSON of every stack of a raytpu.yaml (what `cdktf synth` runs)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds CONFIG and --out."""
    from raytpu.console import argtypes
    parser.add_argument("config", metavar="CONFIG", nargs="?", default=None, type=argtypes.path,
                        help="path of the config (default: $RAYTPU_CONFIG, else raytpu.yaml)")
    parser.add_argument("--out", metavar="DIR", default="cdktf.out", type=argtypes.path,
                        help="output directory (default: cdktf.out, as cdktf uses)")


def _progress(message: str) -> None:
    sys.stderr.write(f"raytpu synth: {message}\n")
    sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    """Checks DIR and the config, synthesizes into a folder beside DIR, then swaps it in for DIR."""
    from raytpu.stacks import synth_out
    synth_out.check(args.out)  # before the config and CDK Terrain are loaded: refused in milliseconds
    from raytpu.console import machine

    machine.check_environment("TMPDIR", "HOME")  # CDK Terrain's node runtime writes in both

    from raytpu.config import choose, load
    from raytpu.images.record import load_refs

    args.config = choose(args.config)

    started = time.monotonic()
    spec = load(args.config)
    _progress(f"{args.config}: valid ({spec.cluster.mode}, {len(spec.slices)} slice kind(s), "
              f"{len(spec.workloads)} workload(s))")
    refs = load_refs(args.config)  # a malformed images record is refused before the slow import below
    _progress("loading CDK Terrain and provider bindings")
    from raytpu.stacks.app import synth

    out = Path(args.out)
    try:
        with synth_out.replacing(out) as tmp:
            _progress("synthesizing")
            written = [path.relative_to(tmp) for path in synth(spec, refs, tmp)]
    except Exception as exc:  # a full file system mid-write (Python's OSError, or node's error naming ENOSPC)
        if not synth_out.full_disk(exc):
            raise
        raise synth_out.unwritten(str(out), exc) from exc  # DIR is as it was (synth_out.replacing)
    for path in written:
        print(out / path)
    _progress(f"done in {time.monotonic() - started:.1f}s: {len(written)} stack(s) in {out}/stacks")
    return 0
