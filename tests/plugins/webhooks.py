"""Real HTTP webhook receivers on loopback, and the verification snippet of docs/webhooks.md.

A receiver is an HTTP server in a thread: it records every request (headers, body, when it came and when it
was answered) and answers with what its ``respond`` function says, or hangs until released. Test settings
allow 127.0.0.1 as a webhook target (BERTH_WEBHOOK_ALLOWED_NETWORKS); other loopback addresses stay refused.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.plugins.kube import wait_for

DOCS = Path(__file__).resolve().parents[2] / "docs" / "webhooks.md"
HANG_LIMIT_SECONDS = 120.0


@dataclass
class Received:
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes
    came_at: float
    answered_at: float | None = None
    status: int | None = None

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """An HTTP server on ``host``; ``respond(received) -> status`` decides each answer (default 200)."""

    host: str = "127.0.0.1"
    respond: Callable[[Received], int] = lambda received: 200
    hang: bool = False
    tls: ssl.SSLContext | None = None  # a server context: the receiver speaks https
    received: list[Received] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                got = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.monotonic())
                with receiver.lock:
                    receiver.received.append(got)
                if receiver.hang:
                    receiver.release.wait(HANG_LIMIT_SECONDS)
                    return  # the connection closes without an answer
                got.status = receiver.respond(got)
                self.send_response(got.status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                got.answered_at = time.monotonic()

            def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows failures
                pass

        self.server = ThreadingHTTPServer((self.host, 0), Handler)
        self.server.daemon_threads = True
        if self.tls is not None:
            self.server.socket = self.tls.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def url(self, path: str = "/hooks/berth", *, host: str = "") -> str:
        return f"{'https' if self.tls else 'http'}://{host or self.host}:{self.port}{path}"

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Received]:
        wait_for(lambda: len(self.received) >= count, timeout=timeout, what=f"{count} webhook(s) at {self.url()}")
        with self.lock:
            return list(self.received)

    def delivered(self) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.status is not None and 200 <= r.status < 300]


@pytest.fixture
def receiver() -> Iterator[Callable[..., Receiver]]:
    """``receiver(respond=..., hang=..., host=...)``: a started receiver, stopped after the test."""
    started: list[Receiver] = []

    def make(**kwargs: Any) -> Receiver:
        started.append(Receiver(**kwargs).start())
        return started[-1]

    yield make
    for r in started:
        r.stop()


def documented_verifier() -> Callable[..., Any]:
    """The ``verify`` function docs/webhooks.md tells receivers to use, taken from the page itself."""
    text = DOCS.read_text()
    match = re.search(r"<!-- verify-snippet -->\s*```python\n(.*?)```", text, re.S)
    assert match, "docs/webhooks.md lost its verification snippet"
    namespace: dict[str, Any] = {}
    exec(compile(match.group(1), str(DOCS), "exec"), namespace)  # our own documentation, as a reader copies it
    return namespace["verify"]


def _certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[str, ec.EllipticCurvePrivateKey] | None):
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer[0])]) if issuer else name
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
    )
    if issuer:
        builder = builder.add_extension(x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False)
    else:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


def tls_receiver_context(tmp_path: Path, hostname: str) -> tuple[ssl.SSLContext, Path]:
    """A server context with a certificate for ``hostname`` from a throwaway CA; and the CA's PEM file."""
    ca_key, leaf_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _certificate("Berth test CA", ca_key, None)
    leaf = _certificate(hostname, leaf_key, ("Berth test CA", ca_key))
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "leaf.pem", tmp_path / "leaf.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        leaf_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return context, ca_file
