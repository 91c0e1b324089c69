"""``raytpu submit NAME --set KEY=VALUE``: one workload's fields changed for one run, without editing the file GKE runs.

Each override is applied to the loaded YAML before it is compiled, so every rule of the config file judges it; a
problem in an overridden value is named ``--set KEY``. Values are YAML scalars (``256``, ``3e-4``, ``true``, ``dots``)
read by the config file's own loader (:func:`raytpu.config.reading.load_yaml`, YAML 1.2's core scalars), so the same
text means the same value in both: ``off`` and ``no`` are strings, ``010`` is 10, ``12:30`` a string.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from raytpu.config import reading
from raytpu.core.common import errors
from raytpu.core.common.errors import InvalidInput
from raytpu.runs.run_list import OVERRIDES_KEY

FLAG = "--set"
FIXED = ("name",)
"""Fields an override may not change: the workload is looked up by its name."""
MAPPING_FIELDS = ("train_config", "engine_kwargs", "env")
"""Fields that are mappings: ``--set FIELD.KEY=VALUE`` sets one key inside (``train_config.d_model=256``).
Not ``secrets`` (:data:`NOT_PER_RUN`)."""
NOT_PER_RUN = {"secrets": (
    "cannot be set for one run: a secret never travels on the command line (it would stay in the shell's history and "
    "in the run's recorded overrides); on GKE the pods read it from the Kubernetes Secret the config names, locally "
    "from your shell's variable of that name",
    "change the Secret itself, or the config's secrets entry (NAME: SECRET or {name: SECRET, key: KEY}); for a local "
    "run, export NAME=... before `raytpu submit --local`")}
"""Workload fields ``--set`` refuses, and why: (what is wrong, what to do)."""
VALID = "KEY=VALUE, KEY a workload field (e.g. steps of train_config: train_config.steps) and VALUE a YAML scalar"


def parse_one(text: str, fields: Sequence[str]) -> tuple[tuple[str, ...], Any]:
    """``KEY=VALUE`` as (key path, scalar); InvalidInput naming ``--set`` otherwise."""
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise errors.invalid_value(FLAG, text, "is not KEY=VALUE", VALID)
    path = tuple(key.split("."))
    if path[0] in NOT_PER_RUN:
        why, instead = NOT_PER_RUN[path[0]]
        raise InvalidInput(f"{FLAG} {errors.excerpt(key)}", f"{path[0]} {why}", instead)
    allowed = [f for f in fields if f not in FIXED]
    if path[0] not in allowed or any(not part for part in path):
        raise errors.invalid_choice(f"{FLAG} {errors.excerpt(key)}", path[0],
                                    [*allowed, *(f"{f}.KEY" for f in MAPPING_FIELDS if f in allowed)],
                                    " (not a field of the workload)")
    if len(path) > 1 and path[0] not in MAPPING_FIELDS:
        raise errors.invalid_value(f"{FLAG} {key}", key, f"goes inside {path[0]}, which is not a mapping",
                                   f"{path[0]}=VALUE, or KEY inside one of {', '.join(MAPPING_FIELDS)}")
    try:  # the config file's loader: the same text means the same value (YAML 1.2's core scalars)
        value = reading.load_yaml(raw, "the value", lambda loc: f"{FLAG} {key}") if raw.strip() else ""
    except InvalidInput as exc:
        raise errors.invalid_value(f"{FLAG} {key}", raw, f"is not a YAML scalar the kit reads ({exc.problem})",
                                   "a number, true/false, null or a string") from exc
    if isinstance(value, Mapping | list):
        raise errors.invalid_value(f"{FLAG} {key}", raw, "is a YAML mapping or list, not a scalar",
                                   "one scalar per --set (repeat --set for more keys)")
    return path, value


def apply(data: dict[str, Any], workload: str, given: Sequence[str], fields: Sequence[str]) -> dict[str, Any]:
    """``data`` (the loaded YAML) with workload ``workload``'s overrides applied (a copy; the file's data is kept).
    A workload missing from the file is left for the usual unknown-workload error."""
    parsed = [parse_one(text, fields) for text in given]
    out = copy.deepcopy(data)
    for work in out.get("workloads") or ():
        if isinstance(work, dict) and work.get("name") == workload:
            for path, value in parsed:
                target = work
                for part in path[:-1]:
                    if not isinstance(target.get(part), dict):
                        target[part] = {} if target.get(part) is None else target[part]
                    target = target[part]
                    if not isinstance(target, dict):  # the file holds a non-mapping there: its rule says so
                        break
                else:
                    target[path[-1]] = value
            break
    return out


def renamed(problem: InvalidInput, prefix: str, given: Sequence[str]) -> InvalidInput:
    """A compile problem inside an overridden field named by its ``--set KEY`` (the user typed it there)."""
    for text in given:
        key = text.partition("=")[0]
        where = f"{prefix}.{key}"
        if problem.field == where or problem.field.startswith((f"{where}.", f"{where}[")):
            return InvalidInput(f"{FLAG} {key}{problem.field[len(where):]}", problem.problem, problem.valid)
    return problem


@contextlib.contextmanager
def naming(prefix: str, given: Sequence[str]) -> Iterator[None]:
    """Problems raised inside (a team's code read after the config: :mod:`raytpu.teamcode.prepared`) named by their
    ``--set KEY`` when they are about an overridden field of workload ``prefix`` (:func:`renamed`)."""
    try:
        yield
    except (InvalidInput, errors.InvalidInputs) as exc:
        if not given:
            raise
        found = [renamed(p, prefix, given) for p in errors.problems_of(exc)]
        raise (found[0] if isinstance(exc, InvalidInput) else errors.InvalidInputs(found)) from exc


def summary(given: Sequence[str]) -> dict[str, Any]:
    """The overrides as ``{KEY: value}`` (JSON), what reports and run listings show."""
    return {".".join(path): value for path, value in (parse_one(text, (text.partition("=")[0].split(".")[0],))
                                                      for text in given)}


ANNOTATION = OVERRIDES_KEY
"""Where a run records its ``--set`` overrides (JSON): a RayJob's annotation, a local job's metadata. Not a label:
a label value is at most 63 characters of ``[A-Za-z0-9_.-]``; annotations hold any text, 256 KiB in all.
Source: k8s.io/apimachinery pkg/api/validation ``ValidateAnnotations`` (TotalAnnotationSizeLimitB = 256 KiB),
pkg/util/validation ``IsValidLabelValue``."""


def annotate(manifest: dict[str, Any], overridden: Mapping[str, Any]) -> None:
    """Records ``overridden`` on the object's metadata (:data:`ANNOTATION`)."""
    import json

    manifest["metadata"].setdefault("annotations", {})[ANNOTATION] = json.dumps(dict(overridden), sort_keys=True)
