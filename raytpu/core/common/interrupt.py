"""A followed run interrupted (Ctrl-C, SIGTERM): the command stops the run it started before it exits, so nothing is
left holding the slice; a second signal while it stops leaves the run going and says how to cancel it (issue 48).

Python raises Ctrl-C's KeyboardInterrupt wherever the main thread is, and drops it there in places: inside a finalizer
("Exception ignored in"), inside a compiled module's import (Ray's ``_raylet``), and one that does propagate out of an
import leaves the module half-loaded. So the CLI remembers each interrupt (:func:`install`, :func:`raise_missed`), and
a step an interrupt must not cut in two holds it until done (:func:`interrupts_held`) (issue 68).
Standard library and the kit's exit codes."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

from raytpu.core.common.errors import EXIT_INTERRUPTED


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C's KeyboardInterrupt is (every command's cleanup runs; the CLI sets it up)."""


class LeftRunning(KeyboardInterrupt):
    """A second signal while an interrupted run was being stopped: the command leaves it as it is."""


INTERRUPTS = (signal.SIGINT, signal.SIGTERM)
_signalled: list[int] = []
"""The interrupts the CLI's handlers took since :func:`install` (what :func:`raise_missed` reads)."""


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _takeable() -> list[int]:
    """The interrupts whose handler is Python's to replace and put back: not ignored, not set outside Python."""
    return [sig for sig in INTERRUPTS if signal.getsignal(sig) not in (signal.SIG_IGN, None)]


def _interrupt(signum: int, _frame: object) -> None:
    _signalled.append(signum)
    raise Terminated if signum == signal.SIGTERM else KeyboardInterrupt


def install() -> Callable[[], None]:
    """Ctrl-C raises KeyboardInterrupt and SIGTERM :class:`Terminated` (every command's cleanup runs, exit 130), each
    remembered for :func:`raise_missed`; returns what puts the replaced handlers back. A SIGINT ignored by whoever
    started the command (``cmd &``) stays ignored; nothing is set off the main thread."""
    if not _main_thread():
        return lambda: None
    _signalled.clear()
    previous = {sig: signal.signal(sig, _interrupt) for sig in _takeable()}

    def restore() -> None:
        _signalled.clear()
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def raise_missed() -> None:
    """Raises the interrupt a signal asked for when its KeyboardInterrupt never reached the command (Python dropped it:
    see the module); a no-op otherwise. Called where the command would not be had the interrupt arrived."""
    if _signalled:
        raise Terminated if _signalled[0] == signal.SIGTERM else KeyboardInterrupt


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block is done, then interrupt as they would have (the handlers the block
    found take them): for a step that must not be cut in two (Ray loading, a job's submission, a cluster's start or
    teardown). A second one interrupts at once (a block that hangs is never held on). A signal ignored stays ignored;
    nothing is held off the main thread."""
    if not _main_thread():
        yield
        return
    caught: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)
        if len(caught) > 1 and callable(handler := previous[signum]):
            caught.clear()  # taken now, not again after the block
            handler(signum, frame)

    previous = {sig: signal.signal(sig, hold) for sig in _takeable()}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if caught:
            signal.raise_signal(caught[0])


def signal_name(interrupt: KeyboardInterrupt) -> str:
    """How the interrupt is named to the user."""
    return "SIGTERM" if isinstance(interrupt, Terminated) else "Ctrl-C"


def _leave(_signum: int, _frame: object) -> None:
    raise LeftRunning


@contextmanager
def second_signal_leaves() -> Iterator[None]:
    """While the body stops a run, a second Ctrl-C or SIGTERM raises :class:`LeftRunning` (the stop is abandoned);
    the handlers it replaced come back after (nothing to set off the main thread)."""
    if not _main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _leave) for sig in INTERRUPTS}
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
