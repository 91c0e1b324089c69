"""What every workload's ``main`` shares: the CLI contract's exit codes and one-line errors."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import socket
from collections.abc import Callable
from typing import Any, NoReturn

from raytpu.core.common.errors import EXIT_RUNTIME, InvalidInput, RaytpuError, RuntimeFailure, report


def guarded(body: Callable[[], int]) -> int:
    """Runs a workload body: bad input exits 2, a runtime failure or an unreachable Ray cluster exits 1.

    Each prints ``error: <field>: <problem>; valid: <...>`` lines instead of a traceback, as the ``raytpu``
    CLI does; anything else is a bug and keeps its traceback.
    """
    try:
        return body()
    except RaytpuError as exc:
        report(exc)
        return exc.exit_code
    except ConnectionError as exc:
        failure = RuntimeFailure(f"address: cannot reach a Ray cluster ({exc})",
                                 "RAY_ADDRESS or --address of a running cluster (`raytpu local up`)")
        failure.__cause__ = exc  # reported, not raised: the cause is set by hand for RAYTPU_DEBUG=1
        report(failure)
        return EXIT_RUNTIME


def connect_quiet_driver(address: str | None, **init: Any) -> bool:
    """Connects this driver to its Ray cluster (``address``, else ``$RAY_ADDRESS``, else the running one) without its
    workers' logs, unless it is connected already; returns whether it connected here (for :func:`end_quiet_driver`)."""
    import ray

    if ray.is_initialized():
        return False
    ray.init(address=address or os.environ.get("RAY_ADDRESS") or "auto", log_to_driver=False,
             logging_level=logging.ERROR, **init)
    return True


def end_quiet_driver(connected_here: bool) -> None:
    """Ends the Ray connection a driver with ``log_to_driver=False`` made itself, once its last line is out: at exit
    Ray's hook would first sleep half a second for worker log lines such a driver never prints. A connection the
    caller had before is left alone, and a failure here changes nothing, as at exit (the verdict is out).
    Source: Ray 2.60 ``ray._private.worker.shutdown`` (``_exiting_interpreter``); docs/FACTS.md#local-driver-exit."""
    if not connected_here:
        return
    import ray

    with contextlib.suppress(Exception):
        if ray.is_initialized():
            ray.shutdown()


class Parser(argparse.ArgumentParser):
    """A workload's flags: a bad one is the CLI's one ``error:`` line and exit 2, not argparse's usage text."""

    def error(self, message: str) -> NoReturn:
        failure = InvalidInput("ARGS", message, f"the flags `{self.prog} --help` lists")
        report(failure)
        raise SystemExit(failure.exit_code)


def check_address(address: str | None, timeout_s: float = 5.0) -> None:
    """ConnectionError at once when ``address`` (``host:port`` of a Ray GCS) does not answer: ``ray.init`` of a closed
    port retries for minutes. Other forms (``auto``, ``ray://``, none) are left to Ray."""
    if not address or "://" in address or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return
    except ValueError:
        return  # not host:port: Ray says what it is
    except OSError as exc:
        raise ConnectionError(f"nothing answers at {address} ({exc.strerror or exc})") from exc
