"""The portal's REST API (``/api/v1/``) over HTTP: credentials, pagination, and answers turned into exit codes.

The credential goes to the configured portal URL and nowhere else: redirects are refused rather than
followed, and list pages are walked with ``limit`` and ``offset``, or, on a list paged by cursor (the audit trail),
the ``cursor`` of the server's ``next`` link, always sent to the configured URL rather than following the link.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import requests

from berth_cli import __version__, oidc
from berth_cli.config import Config, save
from berth_cli.errors import CliError, Exit

PAGE_SIZE = 100
_TIMEOUT_SECONDS = 30
_THROTTLE_RETRIES = 3
_MAX_RETRY_AFTER_SECONDS = 30
_STATUS_EXITS = {400: Exit.INVALID, 401: Exit.AUTH, 403: Exit.FORBIDDEN, 404: Exit.NOT_FOUND, 409: Exit.CONFLICT}
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def is_uuid(text: str) -> bool:
    return _UUID.fullmatch(text) is not None


def object_path(collection: str, object_id: str, *rest: str) -> str:
    """``/api/v1/<collection>/<id>/...``: ids are UUIDs, checked so a hostile argument cannot reshape the path."""
    if not is_uuid(object_id):
        raise CliError(f"{object_id!r} is not an id (a UUID)", Exit.INVALID)
    return "/".join([f"/api/v1/{collection}", str(uuid.UUID(object_id)), *(quote(p, safe="") for p in rest)]) + "/"


def field_errors(body: Any, prefix: str = "") -> list[str]:
    """DRF's error body as ``field: message`` lines (nested fields joined with dots)."""
    if isinstance(body, dict):
        lines = []
        for key, value in body.items():
            name = key if key not in ("detail", "non_field_errors") else ""
            lines += field_errors(value, f"{prefix}.{name}" if prefix and name else prefix or name)
        return lines
    if isinstance(body, list):
        return [line for item in body for line in field_errors(item, prefix)]
    return [f"{prefix}: {body}" if prefix else str(body)]


@dataclass
class Credential:
    """Produces the Authorization header: an API token, or an OIDC access token refreshed when due."""

    config: Config
    token: str = ""

    @classmethod
    def resolve(cls, config: Config) -> Credential:
        token = os.environ.get("BERTH_TOKEN", "").strip() or config.token
        if not token and config.oidc is None:
            raise CliError("not signed in: set BERTH_TOKEN, or run `berth login`", Exit.AUTH)
        return cls(config=config, token=token)

    def header(self) -> str:
        if self.token:
            return f"Token {self.token}"
        settings = self.config.oidc
        assert settings is not None  # resolve() made sure there is one or the other
        if oidc.needs_refresh(settings):
            oidc.refresh(settings)
            save(self.config)
        return f"Bearer {settings.access_token}"


class Api:
    def __init__(self, url: str, credential: Credential | None, *, verify: str | bool = True) -> None:
        if not url:
            raise CliError("no portal URL: pass --url, set BERTH_URL, or run `berth login --url URL`", Exit.USAGE)
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise CliError(f"the portal URL must be http(s)://host[:port], not {url!r}", Exit.USAGE)
        self.base = url.rstrip("/")
        self.credential = credential
        self.verify = verify
        self.session = requests.Session()
        self.session.headers["User-Agent"] = f"berth-cli/{__version__}"

    # -- one call ---------------------------------------------------------------------------------------

    def call(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
        authenticated: bool = True,
    ) -> requests.Response:
        headers = dict(headers or {})
        if authenticated:
            if self.credential is None:
                raise CliError("not signed in: set BERTH_TOKEN, or run `berth login`", Exit.AUTH)
            headers["Authorization"] = self.credential.header()
        for attempt in range(_THROTTLE_RETRIES + 1):
            response = self._send(method, path, params=params, json=json, headers=headers)
            if response.status_code != 429 or attempt == _THROTTLE_RETRIES:
                break
            time.sleep(_retry_after(response))
        return self._checked(response)

    def _send(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        try:
            # verify per call: a Session's verify loses to REQUESTS_CA_BUNDLE (a long-standing requests quirk).
            return self.session.request(
                method, self.base + path, verify=self.verify, timeout=_TIMEOUT_SECONDS, allow_redirects=False, **kwargs
            )
        except requests.exceptions.SSLError as error:
            raise CliError(f"TLS to {self.base} failed (set BERTH_CA_BUNDLE?): {error}") from None
        except requests.RequestException as error:
            raise CliError(f"cannot reach {self.base}: {error}") from None

    def _checked(self, response: requests.Response) -> requests.Response:
        status = response.status_code
        if 200 <= status < 300:
            return response
        if 300 <= status < 400:
            target = response.headers.get("Location", "")
            raise CliError(f"the portal redirected to {target!r}; use that URL (credentials are not forwarded)")
        try:
            body: Any = response.json()
        except ValueError:
            body = None
        code = _STATUS_EXITS.get(status, Exit.ERROR)
        if status == 401:
            hint = " (check BERTH_TOKEN, or run `berth login`)"
            raise CliError(f"credentials refused: {_detail(body) or 'unauthorized'}{hint}", code)
        if status == 400 and body is not None:
            raise CliError("the portal refused the input:", code, field_errors(body))
        message = _detail(body) or f"HTTP {status} from {response.request.method} {urlsplit(response.url).path}"
        raise CliError(message, code)

    # -- conveniences -------------------------------------------------------------------------------------

    def get(self, path: str, **params: Any) -> Any:
        return self.call("GET", path, params={k: v for k, v in params.items() if v not in (None, "")}).json()

    def post(self, path: str, body: dict[str, Any] | None = None, *, idempotency_key: str = "") -> Any:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return self.call("POST", path, json=body or {}, headers=headers).json()

    def each(self, path: str, *, limit: int | None = None, **params: Any) -> Iterator[dict[str, Any]]:
        """Every item of a paginated list (at most ``limit``), page by page: by offset while the list counts its
        rows, else by the cursor of its ``next`` link."""
        paging: dict[str, Any] = {}
        seen = 0
        while True:
            page = self.get(path, limit=PAGE_SIZE, **paging, **params)
            if not isinstance(page, dict) or not isinstance(page.get("results"), list):
                raise CliError(f"unexpected answer from {path}: not a paginated list")
            for item in page["results"]:
                yield item
                seen += 1
                if limit is not None and seen >= limit:
                    return
            if not page["results"]:
                return
            if "count" in page:
                offset = int(paging.get("offset", 0)) + len(page["results"])
                if offset >= int(page.get("count") or 0):
                    return
                paging = {"offset": offset}
            else:
                after = _cursor_of(page.get("next"))
                if after is None:
                    return
                paging = {"cursor": after}

    def all(self, path: str, *, limit: int | None = None, **params: Any) -> list[dict[str, Any]]:
        return list(self.each(path, limit=limit, **params))


def _cursor_of(link: Any) -> str | None:
    """The ``cursor`` of a list's ``next`` link; None when there is no next page."""
    if link is None:
        return None
    values = parse_qs(urlsplit(str(link)).query).get("cursor") if isinstance(link, str) else None
    if not values:
        raise CliError(f"unexpected next link from the portal: {link!r}")
    return values[0]


def _detail(body: Any) -> str:
    detail = body.get("detail") if isinstance(body, dict) else None
    return detail if isinstance(detail, str) else ""


def _retry_after(response: requests.Response) -> float:
    try:
        return min(float(response.headers.get("Retry-After", "1")), _MAX_RETRY_AFTER_SECONDS)
    except ValueError:
        return 1.0


def tls_verify(config: Config) -> str | bool:
    """The CA bundle that verifies the portal (BERTH_CA_BUNDLE, else the config's), else the system's."""
    return os.environ.get("BERTH_CA_BUNDLE", "") or config.ca_file or True


def api_from(config: Config, url: str | None) -> Api:
    """The API for the portal named by --url, BERTH_URL or the config file, with the caller's credential."""
    base = url or os.environ.get("BERTH_URL", "") or config.url
    return Api(base, Credential.resolve(config), verify=tls_verify(config))
