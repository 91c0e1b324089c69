"""``raytpu doctor --stack NAME``: what runs on the cluster against what the kit was built and tested for, one table.

Reads the cluster through the Kubernetes API with google-auth, as ``submit`` does, list and get only
(:mod:`raytpu.cluster.doctor`): the control plane's version against the config's floor, the KubeRay CRDs' fields, the
TPU webhook, the GCS FUSE CSI driver; each slice's nodes (Ready hosts, TPU labels, allocatable chips, taints, holders);
the pods' service account and the bucket; the kit's pods' image digests against ``raytpu.images.json`` and its
RayJobs/RayServices that wait or failed, with their last event. ``--local`` checks the emulated slice the same way
(:mod:`raytpu.local.running.doctor`). Each row: check, ✓/✗/?, found, expected, fix; a read RBAC forbids is a ``?`` row
naming the permission. ``--json`` prints the rows as JSON; ``--report DIR`` also writes them to ``DIR/doctor.json``,
which the smoke report page shows. Exit 0 when every check holds, 1 when one fails, 2 on bad input.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

HELP = "check a deployed stack (or --local, the emulated slice) against what the kit expects; exit 1 if one fails"
REPORT_NAME = "doctor.json"  # raytpu.console.report_html.DOCTOR_NAME
"""The file ``--report DIR`` writes; ``raytpu report`` shows its table beside the smoke report of the same folder."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the stack target, ``--config``, ``--json``, ``--report``, ``--local`` and ``--dir``."""
    from raytpu.console import argtypes
    from raytpu.console.cli_args import add_stack_target

    add_stack_target(parser, stack_note="; required unless --local")
    parser.set_defaults(outputs=None)  # None: not given (refused with --local); the stack reads outputs.json
    parser.add_argument("--config", default=None, type=argtypes.path,
                        help="the config file (default: $RAYTPU_CONFIG, else raytpu.yaml)")
    parser.add_argument("--json", action="store_true",
                        help="print the checks as JSON: {format, doctor, ok, counts, checks: [{check, state, mark, "
                             "found, expected, fix}]}")
    parser.add_argument("--report", default=None, type=argtypes.path, metavar="DIR",
                        help=f"also write the JSON to DIR/{REPORT_NAME} (the smoke report's folder: its page "
                             "shows the table)")
    parser.add_argument("--local", action="store_true", help="check the emulated slice (`raytpu local up`)")
    parser.add_argument("--dir", default=None, type=argtypes.path,
                        help="with --local: the local cluster's run directory")


def run(args: argparse.Namespace) -> int:
    """Checks the arguments, reads the cluster, prints the table (or JSON), writes ``--report``."""
    import json
    import sys

    from raytpu.console.cli_args import refuse_combinations
    from raytpu.console.sides import side_for
    from raytpu.core.common import checkup

    local = ("--local", args.local)
    refuse_combinations(together=[(("--stack", bool(args.stack)), local),
                                  (("--outputs", args.outputs is not None), local),
                                  (("--config", args.config is not None), local)],
                        without=[(("--dir", args.dir is not None), local)])
    report_dir = _report_dir(args.report)
    side = side_for(args, args.local)
    checks, where = side.doctor(args.config)
    document = checkup.to_json(checks, side.name, where)
    if report_dir is not None:
        _write(report_dir, document)
        _page(report_dir)
    if args.json:
        print(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        print(checkup.render(checks), end="")
    code = checkup.exit_code(checks)
    if code:
        print(f"doctor: {document['counts']['fail']} check(s) failed", file=sys.stderr)
    return code



def _report_dir(given: str | None) -> Path | None:
    """``--report``: a folder (made when missing); InvalidInput when it names a file."""
    from raytpu.core.common.errors import InvalidInput, excerpt

    if given is None:
        return None
    path = Path(given)
    if given == "" or (path.exists() and not path.is_dir()):
        raise InvalidInput("--report", f"{excerpt(given, 200, tail=True) or '(empty)'} is not a folder",
                           f"a folder to write {REPORT_NAME} in (made when missing)")
    return path


def _page(folder: Path) -> None:
    """The smoke report's page of ``folder`` drawn again with the doctor table, when the smoke check ran first."""
    import sys

    from raytpu.console import report_html
    from raytpu.core.common import report

    if (folder / report.JSON_NAME).is_file():
        print(f"doctor: {report_html.write_beside(folder / report.JSON_NAME)} shows the table", file=sys.stderr)


def _write(folder: Path, document: dict[str, Any]) -> None:
    """Writes ``folder/doctor.json`` whole (a temporary file renamed over it)."""
    import json
    import os
    import tempfile

    from raytpu.core.common.errors import RuntimeFailure

    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".doctor-", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=2, ensure_ascii=False)
        os.replace(tmp, folder / REPORT_NAME)
    except OSError as exc:
        raise RuntimeFailure(f"--report: cannot write {folder / REPORT_NAME} ({exc.strerror})") from exc
