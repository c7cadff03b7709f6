"""One webhook POST: to an address ``targets`` allowed, within a deadline, never following a redirect.

The connection goes to the checked address itself (the Host header and the TLS server name carry the
URL's host), so a resolver cannot answer "public" to the check and "private" to the connect. A watchdog
closes the socket at the deadline: a receiver that trickles one byte at a time cannot hold a worker longer.
Messages name the host, never the URL's path (a Slack webhook's path is its credential).
"""

from __future__ import annotations

import http.client
import logging
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from functools import cache

from django.conf import settings

from tenants.webhooks import targets
from tenants.webhooks.targets import IPAddress, Target, TargetRefused

logger = logging.getLogger(__name__)
RESPONSE_READ_LIMIT = 64 * 1024


@dataclass(frozen=True)
class Outcome:
    status_code: int | None
    error: str  # '' when the receiver took the event (2xx)
    duration_ms: int
    permanent: bool = False  # not worth retrying: a refused address, or 410 Gone
    retry_after: float | None = None

    @property
    def delivered(self) -> bool:
        return not self.error


class _Watchdog:
    """Shuts the socket down at the deadline, whatever the receiver is doing."""

    def __init__(self, seconds: float) -> None:
        self.sock: socket.socket | None = None
        self.fired = False
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        self.fired = True
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


@cache
def _tls_context(ca_bundle: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=ca_bundle or None)


def _connect(target: Target, addresses: list[IPAddress], deadline: float, watchdog: _Watchdog) -> socket.socket:
    last: OSError | None = None
    for ip in addresses:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            sock = socket.create_connection((str(ip), target.port), timeout=remaining)
        except OSError as exc:
            last = exc
            continue
        watchdog.sock = sock
        if target.tls:
            sock = _tls_context(settings.BERTH_WEBHOOK_CA_BUNDLE).wrap_socket(sock, server_hostname=target.host)
            watchdog.sock = sock
        return sock
    raise last or TimeoutError()


def _request(target: Target, sock: socket.socket, body: bytes, headers: dict[str, str]) -> tuple[int, str]:
    conn = http.client.HTTPConnection(target.host, target.port)
    conn.sock = sock  # already connected to the checked address: http.client never resolves the name itself
    try:
        conn.request("POST", target.path, body=body, headers={"Host": target.netloc, **headers})
        response = conn.getresponse()
        response.read(RESPONSE_READ_LIMIT)
        return response.status, response.getheader("Retry-After", "")
    finally:
        conn.close()


def _retry_after(value: str) -> float | None:
    return float(value) if value.strip().isdigit() else None


def _failure(exc: BaseException, *, timed_out: bool, timeout: float) -> str:
    if timed_out or isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g}s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate not trusted: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        return f"TLS error: {exc.reason or type(exc).__name__}"
    if isinstance(exc, http.client.HTTPException):
        return f"not a valid HTTP answer ({type(exc).__name__})"
    if isinstance(exc, OSError) and exc.strerror:
        return f"network error: {exc.strerror}"
    return f"network error: {type(exc).__name__}"


def _outcome(status: int, retry_after: str, started: float) -> Outcome:
    took = int((time.monotonic() - started) * 1000)
    if 200 <= status < 300:
        return Outcome(status, "", took)
    if 300 <= status < 400:
        return Outcome(status, f"HTTP {status}: redirects are not followed; register the final URL", took)
    return Outcome(status, f"HTTP {status}", took, permanent=status == 410, retry_after=_retry_after(retry_after))


def post(*, url: str, body: bytes, headers: dict[str, str], allow_private: bool, timeout: float) -> Outcome:
    """POST ``body`` to ``url``; what happened, as an Outcome (never raises for the receiver's faults)."""
    started = time.monotonic()
    deadline = started + timeout
    try:
        target = targets.parse(url)
        addresses = targets.checked_addresses(target, allow_private=allow_private)
    except TargetRefused as exc:  # the team reads the delivery log: the resolved address goes to the log only
        logger.warning("webhook refused: %s", exc)
        return Outcome(None, f"refused: {exc.undetailed}", 0, permanent=True)
    with _Watchdog(deadline - time.monotonic()) as watchdog:
        try:
            sock = _connect(target, addresses, deadline, watchdog)
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            status, retry_after = _request(target, sock, body, headers)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            took = int((time.monotonic() - started) * 1000)
            return Outcome(None, _failure(exc, timed_out=watchdog.fired, timeout=timeout), took)
    if watchdog.fired:  # a shut-down socket reads as the end of the answer: whatever was parsed is not one
        return Outcome(None, _failure(TimeoutError(), timed_out=True, timeout=timeout), int(timeout * 1000))
    return _outcome(status, retry_after, started)
