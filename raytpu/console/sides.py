"""Which side a command speaks to: the one place ``--local`` is read (:func:`side_for`), so a command chooses once and
then calls the :class:`raytpu.runs.side.Side` it gets."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raytpu.core.common.errors import InvalidInput
    from raytpu.runs.side import Side

STACK_VALID = "the cluster stack's id, <cluster name>-cluster"


def side_for(args: argparse.Namespace, local: bool, *, with_local: Sequence[InvalidInput] = (),
             without_local: Sequence[InvalidInput] = (), detect: bool = False, valid: str = STACK_VALID) -> Side:
    """The emulated slice when ``local`` (``args.dir``), else the stack ``args.stack`` (``args.outputs``, and
    ``args.team`` where the command has it). ``with_local`` and ``without_local`` are the problems of the flags given
    that belong to the other side: those of the side not chosen are raised together (exit 2). With ``detect``, no
    ``--stack`` and no ``--local`` means the emulated slice when one is up (else exit 2 naming both); otherwise a
    missing ``--stack`` is refused (``valid``) when the stack is first needed, after the command's own checks."""
    from raytpu.cluster.side import ClusterSide
    from raytpu.console import machine
    from raytpu.core.common import errors
    from raytpu.local.running.side import LocalSide

    errors.raise_found(list(with_local if local else without_local))
    if not local and not args.stack and detect:
        from raytpu.local.slice.state import LocalCluster, run_dir

        if LocalCluster.load(run_dir(None)) is None:  # no emulated slice here either: say both ways
            raise errors.missing("--stack", "(or --local)", valid)
        local = True  # only an emulated slice is up: its runs (issue 68 item 6)
    if local:
        return LocalSide(args.dir, check_environment=machine.check_environment)
    return ClusterSide(args.stack, args.outputs, getattr(args, "team", None), valid=valid)
