"""The ``type=`` functions of every ``raytpu`` command's numeric and path options, in one place: a bad value
(``--poll-s -1``) is refused while the command line is parsed, before credentials, outputs or a cluster are looked up,
as ``<value> <what is wrong>; valid: <...>``, which :class:`raytpu.cli._Parser` makes the kit's ``error:`` line (exit
2). Standard library only: ``raytpu describe`` stays fast."""

from __future__ import annotations

import argparse
import math
import re

from raytpu.core.common.errors import excerpt
from raytpu.core.common.names import RUN_ID_LENGTH

MAX_SECONDS = 30 * 24 * 3600
"""The longest wait or timeout taken (30 days): beyond it ``time.sleep`` and deadlines overflow or mean a typo."""

MAX_COUNT = 1_000_000
"""The largest count taken (slices, steps): far above any TPU fleet, far below an int that overflows a sleep."""


def _refuse(shown: str, problem: str, valid: str) -> argparse.ArgumentTypeError:
    """The refusal of one value, ``shown`` as :func:`raytpu.core.common.errors.invalid_value` shows values."""
    return argparse.ArgumentTypeError(f"{shown} {problem}; valid: {valid}")


class WholeNumber:
    """A whole number in ``[low, high]`` (``positive_int`` and bounded counts)."""

    def __init__(self, low: int, high: int, unit: str = "", problem: str = "is out of range") -> None:
        self.low, self.high, self.unit, self.problem = low, high, unit, problem
        self.__name__ = "whole number"  # argparse names the type in its own messages

    def __call__(self, text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise _refuse(excerpt(text), "is not a whole number", self.valid()) from None
        if not self.low <= value <= self.high:
            raise _refuse(str(value), self.problem, self.valid())
        return value

    def valid(self) -> str:
        """What this option takes, for the ``valid:`` part."""
        return f"{self.low} to {self.high}{f' {self.unit}' if self.unit else ''}"


class Seconds:
    """A finite number of seconds in ``(0, high]`` (``nan``, ``inf``, zero and negatives refused)."""

    def __init__(self, high: float = MAX_SECONDS, zero_ok: bool = False) -> None:
        self.high, self.zero_ok = high, zero_ok
        self.__name__ = "seconds"

    def __call__(self, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise _refuse(excerpt(text), "is not a number of seconds", self.valid()) from None
        if not math.isfinite(value) or not (value >= 0 if self.zero_ok else value > 0) or value > self.high:
            raise _refuse(f"{value:g}", "is out of range", self.valid())
        return value

    def valid(self) -> str:
        """What this option takes, for the ``valid:`` part."""
        return f"a number of seconds {'from 0' if self.zero_ok else 'above 0'} and at most {self.high:.0f}"


positive_int = WholeNumber(1, MAX_COUNT)
"""A count of at least one (``--slices``, ``--dcn-slices``, ``--steps``)."""

positive_seconds = Seconds()
"""A timeout or a poll interval in seconds (``--timeout-s``, ``--poll-s``)."""

notice_seconds = Seconds(high=3600, zero_ok=True)
"""A preemption notice (``--notice-s``): 0 is none (a host crash); GKE gives seconds, not hours."""

worker_index = WholeNumber(0, MAX_COUNT)
"""A host's ``TPU_WORKER_ID`` (``--host``): the slice's size bounds it where the slice is known."""


def path(text: str) -> str:
    """A file or directory path: non-empty (an empty ``--config ""`` would silently mean the default one)."""
    if not text.strip() or "\0" in text:
        raise _refuse(excerpt(text), "is not a path", "a file or directory path")
    return text


_RUN_ID = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def run_id(text: str) -> str:
    """A run suffix (``--run-id``): the tail of DNS-1035 RayJob names, as long as the one ``validate`` counted. Source:
    k8s.io/apimachinery validation ``IsDNS1035Label`` (KubeRay names RayJobs' RayClusters from it)."""
    if not _RUN_ID.match(text) or len(text) > RUN_ID_LENGTH:
        raise _refuse(excerpt(text, 40), "is not a run id",
                      f"1 to {RUN_ID_LENGTH} lowercase letters, digits and inner '-' (every derived job name was "
                      "bounded with that length)")
    return text


PY_MODULES_SCHEMES = ("gs", "file", "https", "http", "s3", "azure", "abfss")
"""The URI schemes Ray fetches ``py_modules`` from on every node.
Source: ray 2.60 ``ray._private.runtime_env.protocol.ProtocolsProvider.get_remote_protocols``."""


def py_modules_uri(text: str) -> str:
    """The core zip's URI (``--py-modules``): a ``.zip`` at a URI every Ray node can fetch."""
    scheme, sep, rest = text.partition("://")
    if not sep or scheme not in PY_MODULES_SCHEMES or not rest.strip("/") or not text.endswith(".zip"):
        raise _refuse(excerpt(text), "is not a zip URI Ray fetches",
                      f"SCHEME://PATH/raytpu.zip, SCHEME one of {', '.join(PY_MODULES_SCHEMES)}")
    return text


def image(text: str) -> str:
    """An image reference (``--image``) that pins what every pod pulls, by the config's own rule."""
    from raytpu.core.specs.spec import image_problem

    if wrong := image_problem(text):
        raise _refuse(excerpt(text), *wrong)
    return text
