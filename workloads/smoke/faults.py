"""Fault injection for tests and drills: the ``RAYTPU_SMOKE_INJECT_*`` variables the driver reads.

``RAYTPU_SMOKE_INJECT_SLOW_DEVICE=<worker>:<device>:<factor>`` stretches that device's timed loops by ``factor`` (a
sleep inside the timed region); ``RAYTPU_SMOKE_INJECT_HOST_ERROR=<worker>`` makes that host's check raise;
``RAYTPU_SMOKE_INJECT_SLOW_AXIS=<axis>:<factor>`` stretches every host's timed all-reduce over mesh axis ``axis``.
The verdict's ``injected`` key names what was active.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from raytpu.core.common.errors import invalid_value
from raytpu.core.tpu.ici import ICI_AXIS_NAMES

ENV_INJECT_SLOW = "RAYTPU_SMOKE_INJECT_SLOW_DEVICE"
"""Fault injection: ``<worker>:<device>:<factor>``, that host's local device looks ``factor`` times slower."""
ENV_INJECT_ERROR = "RAYTPU_SMOKE_INJECT_HOST_ERROR"
"""Fault injection: ``<worker>``, that host's check raises before JAX starts."""
ENV_INJECT_SLOW_AXIS = "RAYTPU_SMOKE_INJECT_SLOW_AXIS"
"""Fault injection: ``<axis>:<factor>`` (axis x, y or z), the all-reduce over that mesh axis looks ``factor`` times
slower on every host."""


@dataclass(frozen=True)
class Faults:
    """Fault injection from ``RAYTPU_SMOKE_INJECT_*`` (never set by the kit itself): a slow device (worker, device,
    factor), a worker whose check raises, and a slow mesh axis (axis, factor).
    """

    slow: tuple[int, int, float] | None = None
    error_worker: int | None = None
    slow_axis: tuple[str, float] | None = None

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Faults:
        """Parses the variables; a malformed value is invalid input (exit 2)."""
        env = dict(os.environ) if env is None else env
        slow = env.get(ENV_INJECT_SLOW, "")
        error = env.get(ENV_INJECT_ERROR, "")
        axis = env.get(ENV_INJECT_SLOW_AXIS, "")
        slow_axis = None
        if axis:
            name, _, factor = axis.partition(":")
            try:
                slow_axis = (name, float(factor))
            except ValueError:
                slow_axis = None
            if name not in ICI_AXIS_NAMES or slow_axis is None or slow_axis[1] < 1:
                raise invalid_value(ENV_INJECT_SLOW_AXIS, axis, "is not <axis>:<factor> with axis x, y or z",
                                    "e.g. y:4")
        try:
            parts = slow.split(":") if slow else []
            parsed = (int(parts[0]), int(parts[1]), float(parts[2])) if slow else None
            if parsed is not None and (len(parts) != 3 or parsed[2] < 1):
                raise ValueError(slow)
        except (ValueError, IndexError) as exc:
            raise invalid_value(ENV_INJECT_SLOW, slow, "is not <worker>:<device>:<factor>", "e.g. 1:2:10") from exc
        if error and not error.isdigit():
            raise invalid_value(ENV_INJECT_ERROR, error, "is not a worker id", "e.g. 1")
        return cls(parsed, int(error) if error else None, slow_axis)

    def for_host(self, worker: int) -> dict[str, Any]:
        """What host ``worker``'s task gets: ``{"error": bool, "slow": {device: factor}}``, plus
        ``"slow_axis": {axis: factor}`` (every host) when an axis is slowed."""
        slow = {self.slow[1]: self.slow[2]} if self.slow and self.slow[0] == worker else {}
        given: dict[str, Any] = {"error": self.error_worker == worker, "slow": slow}
        if self.slow_axis:
            given["slow_axis"] = {self.slow_axis[0]: self.slow_axis[1]}
        return given

    def describe(self) -> list[str]:
        """One line per injected fault (the verdict's ``injected`` key)."""
        lines = []
        if self.slow:
            lines.append(f"{ENV_INJECT_SLOW}: host {self.slow[0]} device {self.slow[1]} slowed x{self.slow[2]:g}")
        if self.error_worker is not None:
            lines.append(f"{ENV_INJECT_ERROR}: host {self.error_worker}'s check raises")
        if self.slow_axis:
            lines.append(f"{ENV_INJECT_SLOW_AXIS}: the all-reduce over axis {self.slow_axis[0]} slowed "
                         f"x{self.slow_axis[1]:g}")
        return lines
