"""A training run's summary line, ``RAYTPU_TRAIN_RESULT {json}``: written by the trainers on the slice
(``workloads/train.py``, ``workloads/support/team_train.py``), read back from the driver's log by the commands and the
emulated slice. Beside the smoke verdict (:mod:`.report`) and timeline stamp (:mod:`.timeline`) lines, so a reader never
imports a pod program. Standard library only."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

MARKER = "RAYTPU_TRAIN_RESULT"


def result_line(summary: Mapping[str, Any]) -> str:
    """The line a trainer prints at its end."""
    return f"{MARKER} {json.dumps(dict(summary), sort_keys=True)}"


def parse_result(text: str) -> dict[str, Any] | None:
    """The last ``RAYTPU_TRAIN_RESULT`` summary in ``text``, or None."""
    found = None
    for line in text.splitlines():
        if line.startswith(MARKER + " "):
            try:
                found = json.loads(line[len(MARKER) + 1:])
            except json.JSONDecodeError:
                continue
    return found
