"""What a failed team run's driver log says went wrong, in the user's terms: a module the code imports that is not
installed names that module and the field that installs it (``workloads[i].requirements``), instead of "see its
driver log above" (issue 48, "Messages")."""

from __future__ import annotations

import re
from collections.abc import Iterable

_HOST_FAILED = re.compile(r"error: every_host: (?P<what>host \d+ \(.*?\) (?:exited with code \d+|was lost .*?));")
"""The every-host driver's own error line (:mod:`raytpu.workloads.every_host`): which host ended the run."""
_MISSING = re.compile(r"(?:ModuleNotFoundError|ImportError): No module named '(?P<module>[A-Za-z0-9_.]+)'")


def missing_module(lines: Iterable[str]) -> str | None:
    """The module of the last ``ModuleNotFoundError: No module named 'x'`` a driver or worker printed, else None."""
    found = None
    for line in lines:
        for match in _MISSING.finditer(line):
            found = match.group("module")
    return found


def failed_valid(lines: Iterable[str], prefix: str, *, has_requirements: bool) -> str:
    """The ``valid:`` part of a failed run's error: what to do about a missing module, else the driver log."""
    module = missing_module(lines)
    if module is None:
        return "see its driver log above"
    field = f"{prefix}.requirements" if prefix else "requirements"
    top = module.split(".")[0]
    if has_requirements:
        return (f"the code imports {module}, which its environment lacks: add the distribution that provides {top} "
                f"to the file {field} names (inside `code`), then submit again")
    return (f"the code imports {module}, which the kit's image lacks: add a requirements file inside `code` "
            f"naming the distribution that provides {top} (e.g. a line `{top}`) and set {field} to it, then submit "
            "again")


def failed_problem(head: str, lines: Iterable[str]) -> str:
    """``head``, plus the missing module when the log shows one, and the host that ended an every-host run."""
    lines = list(lines)
    host = next((m.group("what") for line in reversed(lines) if (m := _HOST_FAILED.search(line))), None)
    head = head if host is None else f"{head}: {host}, the other hosts stopped"
    module = missing_module(lines)
    return head if module is None else f"{head}: ModuleNotFoundError: No module named {module!r}"
