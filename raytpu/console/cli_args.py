"""What more than one ``raytpu`` command shares on its command line: the deployed stack's options, the local commands'
default config as help says it, the YAML ``--dry-run`` prints. Standard library at import."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

LOCAL_DEFAULT = "$RAYTPU_CONFIG, else raytpu.yaml, else raytpu.example.yaml"
"""The local commands' default config, as help says it (:func:`raytpu.config.choose` with ``local``)."""


Given = tuple[str, bool]
"""A flag and whether the command line gave it."""


def refuse_combinations(*, together: Sequence[tuple[Given, Given]] = (),
                        without: Sequence[tuple[Given, Given]] = ()) -> None:
    """Flags that cannot go together (both given), or one given without the flag it is for: every such flag
    refused at once (exit 2, each naming both), before the command reads or starts anything."""
    from raytpu.core.common import errors

    found = [errors.InvalidInput(a, f"cannot go with {b}", f"{a} or {b}, not both")
             for (a, has_a), (b, has_b) in together if has_a and has_b]
    found += [errors.InvalidInput(a, f"is only for {b}", f"{b} {a} ..., or no {a}")
              for (a, has_a), (b, has_b) in without if has_a and not has_b]
    errors.raise_found(found)


def add_stack_target(parser: argparse.ArgumentParser, stack_note: str = "") -> None:
    """``--stack`` and ``--outputs``: which deployed stack, and the file of its outputs (``submit``, ``smoke``,
    ``runs``)."""
    from raytpu.cluster.outputs import DEFAULT_OUTPUTS
    from raytpu.console import argtypes

    parser.add_argument("--stack", help="the cluster stack's id in the outputs file "
                                         f"(<cluster name>-cluster, e.g. ray-tpu-cluster){stack_note}")
    parser.add_argument("--outputs", default=DEFAULT_OUTPUTS, type=argtypes.path,
                        help=f"stack outputs: the file `cdktf deploy --outputs-file` wrote, or "
                             f"`terraform output -json` saved (default {DEFAULT_OUTPUTS})")


def add_stack_arguments(parser: argparse.ArgumentParser, stack_note: str = "") -> None:
    """Options shared by ``submit`` and ``smoke``; ``stack_note`` ends ``--stack``'s help (submit: unless --local)."""
    from raytpu.console import argtypes

    add_stack_target(parser, stack_note)
    parser.add_argument("--config", default=None, type=argtypes.path,
                        help="the config file (default: $RAYTPU_CONFIG, else raytpu.yaml)")
    parser.add_argument("--py-modules", type=argtypes.py_modules_uri,
                        help="URI of the raytpu zip in the jobs' runtime env (default "
                             "file:///mnt/gcs/raytpu/raytpu-<version>.zip: the bucket's "
                             "gs://<bucket>/raytpu/raytpu-<version>.zip through GCS FUSE)")
    parser.add_argument("--upload-core", action="store_true",
                        help="zip the installed raytpu package and upload it (GCS JSON API, ADC) to "
                             "gs://<bucket>/raytpu/raytpu-<version>.zip (or to --py-modules if that is gs://) "
                             "before applying (the cluster stack's deploy uploads it too; use this for a core "
                             "changed since)")
    parser.add_argument("--run-id", type=argtypes.run_id,
                        help=f"suffix of RayJob names, 1-{argtypes.RUN_ID_LENGTH} characters (default: base-36 time)")
    parser.add_argument("--dry-run", action="store_true", help="print the manifests as YAML; apply nothing")


def print_yaml(manifests: list[dict[str, object]]) -> None:
    """Prints manifests as a multi-document YAML stream (what --dry-run shows)."""
    import yaml

    print(yaml.safe_dump_all(manifests, sort_keys=False, width=120), end="")


def add_api_key_file(parser: argparse.ArgumentParser, when: str = "") -> None:
    """``--api-key-file FILE``: the key a serving workload deployed on the emulated slice requires (``local serve``,
    ``submit --local``); ``when`` starts its help (submit: with --local, a serving workload)."""
    from raytpu.console import argtypes

    parser.add_argument("--api-key-file", default=None, type=argtypes.path, metavar="FILE" if when else None,
                        help=f"{when}require the API key in this file (Authorization: Bearer <key>) on every request, "
                             "as security.serve_api_key_secret does on GKE")
