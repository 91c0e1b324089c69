"""The old home of :mod:`raytpu.console.machine`, kept for raytpu/commands/demo.py until it imports the new one (the
same module object at run time, so a patch on either name is seen by both). Delete once nothing imports it."""

import sys
from typing import TYPE_CHECKING

from raytpu.console import machine as _moved

if TYPE_CHECKING:
    from raytpu.console.machine import *  # noqa: F403 (what the type checker reads)
else:
    sys.modules[__name__] = _moved
