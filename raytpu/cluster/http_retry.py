"""Which failed requests to a Google API are retried and how long to wait: one urllib3 ``Retry`` for both clients.

The ``kubernetes`` client's pool applies it to every request (:mod:`raytpu.cluster.kube.kube_client`); Cloud Build and
Storage mount it on their ``requests`` session. 429, 5xx (any verb, unless a subclass narrows it) and connection errors
are retried after ``Retry-After`` or a backoff, at most :data:`MAX_PAUSE_S`; the last error answer is returned so its
body names the problem. Source: docs/FACTS.md#client-http-retry. Loads urllib3: imported only when a client is made."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Self

from urllib3.exceptions import InvalidHeader, NewConnectionError, SSLError, TimeoutError
from urllib3.util.retry import Retry

if TYPE_CHECKING:
    from urllib3.connectionpool import ConnectionPool
    from urllib3.response import BaseHTTPResponse

RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
"""Statuses that mean "busy, ask again": retried, then reported as "retry later"."""

MAX_PAUSE_S = 30.0
"""The longest pause between two attempts, whatever the backoff or the server's Retry-After says."""


class HttpRetry(Retry):
    """urllib3's Retry with four choices of the kit's (each says why urllib3's default does not fit)."""

    RETRY_AFTER_STATUS_CODES = RETRIED_STATUSES  # a Retry-After alone retries nothing more (urllib3 adds 413)

    def increment(self, method: str | None = None, url: str | None = None, response: BaseHTTPResponse | None = None,
                  error: Exception | None = None, _pool: ConnectionPool | None = None,
                  _stacktrace: TracebackType | None = None) -> Self:
        """A timeout or a TLS failure is raised at once: urllib3 would retry them as connect or read errors, but
        a timeout has already waited its time and TLS trust does not change between attempts."""
        if error is not None and not transient(error):
            raise error.with_traceback(_stacktrace)
        return super().increment(method, url, response, error, _pool, _stacktrace)

    def get_backoff_time(self) -> float:
        """``backoff_factor * 2 ** (retries so far - 1)``, at most ``backoff_max``: the first retry waits too (a control
        plane answering 5xx while it upgrades needs the pause; urllib3 would not wait)."""
        if not self.history:
            return 0.0
        return float(min(self.backoff_max, self.backoff_factor * 2 ** (len(self.history) - 1)))

    def get_retry_after(self, response: BaseHTTPResponse) -> float | None:
        """The server's Retry-After when it asks for longer than the backoff (urllib3 would wait less when it asks
        for less); an unreadable one is ignored (urllib3 would raise InvalidHeader)."""
        try:
            asked = super().get_retry_after(response)
        except InvalidHeader:
            return None
        return None if asked is None else max(asked, self.get_backoff_time())


def transient(exc: Exception) -> bool:
    """Whether a transport error is worth retrying: not TLS trust, not a timeout (already waited)."""
    if isinstance(exc, SSLError):
        return False
    if isinstance(exc, NewConnectionError):
        return True
    return not isinstance(exc, TimeoutError)


def policy(retries: int, backoff_s: float, kind: type[HttpRetry] = HttpRetry) -> HttpRetry:
    """Up to ``retries`` retries of any failure worth one (one shared total), the first after ``backoff_s``, doubling;
    no redirects followed (the APIs send none). ``kind`` narrows what is retried."""
    return kind(total=retries, redirect=False, status_forcelist=RETRIED_STATUSES, allowed_methods=None,
                backoff_factor=backoff_s, backoff_max=MAX_PAUSE_S, retry_after_max=int(MAX_PAUSE_S),
                respect_retry_after_header=True, raise_on_status=False)
