"""Hostile request bodies against the live portal (gunicorn) over real HTTP: 50 MB declared or chunked, JSON
nested 100,000 levels deep, JSON that is not UTF-8, and a YAML alias bomb.

The API parses JSON and forms only (DRF, tenants/api/parsers.py) and nothing in the portal takes a file. Django
refuses a body over DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB) by its Content-Length before reading it, or once that
much was read; the API says so in a 400. Each attack gets a 400 or 415 with a readable reason, never a 500, within
seconds, and the workers' peak RSS (VmHWM) does not grow by the body's size.
"""

from __future__ import annotations

import http.client
import json
import re
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from tenants.api.parsers import MAX_DEPTH
from tests.fixtures import TokenFactory
from tests.plugins.portal import LivePortal

pytestmark = pytest.mark.django_db(transaction=True)

FIFTY_MB = 50 * 1024 * 1024
PIECE = 64 * 1024
SECONDS = 10.0  # each answer comes in well under a second; a busy shared machine gets headroom
HWM_GROWTH_KB = 32 * 1024  # far below any of the 50 MB bodies
API = "/api/v1/requests/"


def _pieces(total: int, filler: bytes, head: bytes = b"") -> Iterator[bytes]:
    yield head
    sent = len(head)
    while sent < total:
        piece = filler * max(1, min(PIECE, total - sent) // len(filler))
        sent += len(piece)
        yield piece


def _post(
    portal: LivePortal, path: str, headers: dict[str, str], pieces: Iterator[bytes], *, length: int | None
) -> tuple[int, bytes, float]:
    """POST over a socket of its own, sending ``pieces`` only while the server has not answered (it may refuse on
    the headers alone, and never read the rest); ``length`` None sends the body chunked. (status, body, seconds)."""
    url = urlsplit(portal.url)
    began = time.monotonic()
    with socket.create_connection((url.hostname, url.port), timeout=30) as sock:
        framing = {"Transfer-Encoding": "chunked"} if length is None else {"Content-Length": str(length)}
        head = "".join(f"{k}: {v}\r\n" for k, v in {"Host": url.netloc, **headers, **framing}.items())
        sock.sendall(f"POST {path} HTTP/1.1\r\n{head}\r\n".encode())
        sock.setblocking(False)
        pending = b""
        for piece in pieces:
            if length is None and piece:
                piece = b"%x\r\n%s\r\n" % (len(piece), piece)
            pending += piece
            while pending:
                readable, writable, _ = select.select([sock], [sock], [], 30)
                if readable:
                    break
                try:
                    pending = pending[sock.send(pending) :]
                except (BrokenPipeError, ConnectionResetError):
                    break
            if pending:
                break
        else:
            if length is None:
                sock.setblocking(True)
                sock.sendall(b"0\r\n\r\n")
        sock.setblocking(True)
        response = http.client.HTTPResponse(sock)
        response.begin()
        body = response.read()
    return response.status, body, time.monotonic() - began


def _worker_pids(portal: LivePortal) -> list[int]:
    return [int(pid) for pid in re.findall(rb"Booting worker with pid: (\d+)", portal.log.read_bytes())]


def _peak_rss_kb(pids: list[int]) -> dict[int, int]:
    peaks = {}
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except FileNotFoundError:
            continue  # a worker gunicorn replaced
        if found := re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE):
            peaks[pid] = int(found.group(1))
    return peaks


def test_hostile_bodies_are_refused_with_a_reason_in_bounded_time_and_memory(
    live_portal: LivePortal, api_token: TokenFactory, alice
) -> None:
    api = {"Authorization": f"Token {api_token(alice)}"}
    as_json = {**api, "Content-Type": "application/json"}
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    too_large = f"The request body is larger than {limit} bytes.".encode()
    too_deep = f"JSON parse error - nested deeper than {MAX_DEPTH} levels".encode()
    deep_list = b"[" * 100_000 + b"]" * 100_000
    deep_object = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
    just_too_deep = b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    laughs = b'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + b"".join(
        f"{c}: &{c} [{','.join(['*' + chr(ord(c) - 1)] * 9)}]\n".encode() for c in "bcdefghi"
    )
    filler = b'"lol",'
    latin_1 = '{"name": "café"}'.encode("latin-1")
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    # name: (path, headers, body pieces, Content-Length or None for chunked, status, what the answer says)
    attacks: dict[str, tuple[str, dict[str, str], Iterator[bytes], int | None, int, bytes]] = {
        "50 MB of JSON": (API, as_json, _pieces(FIFTY_MB, filler, b"["), FIFTY_MB, 400, too_large),
        "50 MB of form": (API, {**api, **form}, _pieces(FIFTY_MB, b"a", b"purpose="), FIFTY_MB, 400, too_large),
        # Without a Content-Length DRF reads no body at all: the request has none of its fields.
        "50 MB of JSON, chunked": (
            API,
            as_json,
            _pieces(FIFTY_MB, filler, b"["),
            None,
            400,
            b'"team":["This field is required."]',
        ),
        "JSON lists 100,000 deep": (API, as_json, iter([deep_list]), len(deep_list), 400, too_deep),
        "JSON objects 100,000 deep": (API, as_json, iter([deep_object]), len(deep_object), 400, too_deep),
        f"JSON {MAX_DEPTH + 1} deep": (API, as_json, iter([just_too_deep]), len(just_too_deep), 400, too_deep),
        "Latin-1 JSON": (
            API,
            as_json,
            iter([latin_1]),
            len(latin_1),
            400,
            b"JSON parse error - 'utf-8' codec can't decode byte 0xe9",
        ),
        "a YAML alias bomb": (
            API,
            {**api, "Content-Type": "application/yaml"},
            iter([laughs]),
            len(laughs),
            415,
            b'Unsupported media type \\"application/yaml\\" in request.',
        ),
        # A browser page: with a CSRF cookie the CSRF check reads the form's token, and Django refuses the body.
        "50 MB form to the sign-in page": (
            "/login/",
            {**form, "Cookie": "csrftoken=" + "a" * 32},
            _pieces(FIFTY_MB, b"a", b"username="),
            FIFTY_MB,
            400,
            b"<title>Bad request",
        ),
    }
    pids = _worker_pids(live_portal)
    before = _peak_rss_kb(pids)
    for name, (path, headers, pieces, length, status, reason) in attacks.items():
        got, body, seconds = _post(live_portal, path, headers, pieces, length=length)
        assert (got, reason in body) == (status, True), f"{name}: {got} {body[:300]!r}"
        assert seconds < SECONDS, name
        if path == API:
            json.loads(body)  # the API's JSON error body, not a page
    after = _peak_rss_kb(pids)
    assert before and after.keys() == before.keys()  # no worker died or was replaced
    assert {pid: after[pid] - before[pid] < HWM_GROWTH_KB for pid in pids} == dict.fromkeys(pids, True), (
        before,
        after,
    )
