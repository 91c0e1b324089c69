"""A followed run interrupted (Ctrl-C, SIGTERM): the command stops the run it started before it exits, so nothing is
left holding the slice; a second signal while it stops leaves the run going and says how to cancel it (issue 48).
Standard library and the kit's exit codes."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from raytpu.core.common.errors import EXIT_INTERRUPTED


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C's KeyboardInterrupt is (every command's cleanup runs; the CLI sets it up)."""


class LeftRunning(KeyboardInterrupt):
    """A second signal while an interrupted run was being stopped: the command leaves it as it is."""


def signal_name(interrupt: KeyboardInterrupt) -> str:
    """How the interrupt is named to the user."""
    return "SIGTERM" if isinstance(interrupt, Terminated) else "Ctrl-C"


def _leave(_signum: int, _frame: object) -> None:
    raise LeftRunning


@contextmanager
def second_signal_leaves() -> Iterator[None]:
    """While the body stops a run, a second Ctrl-C or SIGTERM raises :class:`LeftRunning` (the stop is abandoned);
    the handlers it replaced come back after (nothing to set off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _leave) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stop_on_interrupt(interrupt: KeyboardInterrupt, run: str, stop: Callable[[], bool], cancel_command: str,
                      say: Callable[[str], None]) -> int:
    """Stops ``run`` after ``interrupt`` (``stop`` returns once it has ended and its slice is free, False when it was
    never submitted, or raises) and says so on ``say``; the exit code (130). A second signal meanwhile leaves it
    running, naming ``cancel_command``; a failed stop says the same and re-raises."""
    code = EXIT_INTERRUPTED
    say(f"{signal_name(interrupt)}: stopping run {run} and freeing its slice (again to leave it running)")
    try:
        with second_signal_leaves():
            was_submitted = stop()
    except LeftRunning:
        say(f"error: interrupted: run {run} goes on, holding its slice; cancel it with `{cancel_command}`")
        return code
    except BaseException:
        say(f"error: interrupted: run {run} may still be running; cancel it with `{cancel_command}`")
        raise
    say(f"error: interrupted: run {run} was stopped before it ended; its slice is free" if was_submitted else
        f"error: interrupted: run {run} was never submitted; nothing runs")
    return code
