"""What every workload's ``main`` shares: the CLI contract's exit codes and one-line errors."""

from __future__ import annotations

import sys
from collections.abc import Callable

from raytpu.errors import EXIT_INVALID, EXIT_RUNTIME, InvalidInput


def guarded(body: Callable[[], int]) -> int:
    """Runs a workload body: an impossible slice exits 2, an unreachable Ray cluster exits 1.

    Both print one ``error: <field>: <problem>; valid: <...>`` line instead of a traceback, as the
    ``raytpu`` CLI does; anything else is a bug and keeps its traceback.
    """
    try:
        return body()
    except InvalidInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    except ConnectionError as exc:
        print(f"error: address: cannot reach a Ray cluster ({exc}); valid: RAY_ADDRESS or --address of a "
              "running cluster (`raytpu local up`)", file=sys.stderr)
        return EXIT_RUNTIME
