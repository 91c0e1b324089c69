"""What a command started from a user's terminal gets, for tests that send it Ctrl-C."""

from __future__ import annotations

import signal


def as_from_a_terminal() -> None:
    """Ctrl-C deliverable, as in a user's terminal: a test run started in the background (``make test &``, nohup)
    ignores SIGINT, which its children inherit, and Python then installs no KeyboardInterrupt handler. Passed as a
    ``subprocess.Popen`` ``preexec_fn``."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
