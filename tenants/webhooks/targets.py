"""Where a webhook may go (server-side request forgery).

A URL is http or https, without credentials, to a host whose every address is a public one. Loopback,
link-local (cloud metadata at 169.254.169.254), multicast, unspecified and reserved addresses are refused;
private ranges only where a platform admin allowed them for the endpoint. Networks in
``BERTH_WEBHOOK_ALLOWED_NETWORKS`` (the operator's explicit choice, e.g. 127.0.0.1/32 in tests) are always allowed.

The check runs when an endpoint is saved and again before every attempt, on the very addresses the sender
then connects to: a name that resolved to a public address when it was saved may resolve to 127.0.0.1 now
(DNS rebinding), and an address embedded in IPv6 (::ffff:a.b.c.d, 6to4, NAT64) is judged as itself.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit

from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_URL_LENGTH = 2000
PRIVATE_NETWORKS = tuple(
    ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
)
NAT64 = ipaddress.ip_network("64:ff9b::/96")


class TargetRefused(Exception):
    """The URL or one of its addresses may not be reached; the message names the host, never the path.

    ``undetailed`` says the same without the address a name resolved to: what people other than platform admins
    are told (and what the delivery log keeps), so the server's resolver cannot map internal names for them."""

    def __init__(self, message: str, *, undetailed: str = "") -> None:
        super().__init__(message)
        self.undetailed = undetailed or message


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str  # as the Host header and TLS server name carry it (IDNA, lower case, no brackets)
    port: int
    path: str  # path and query: what the request line asks for
    origin: str  # scheme://host[:port], safe to show and log

    @property
    def tls(self) -> bool:
        return self.scheme == "https"

    @property
    def netloc(self) -> str:
        """host[:port] as the Host header carries it (the port only when it is not the scheme's own)."""
        return self.origin.split("://", 1)[1]


def parse(url: str) -> Target:
    """The parts of a webhook URL; TargetRefused with the reason when it cannot be one."""
    if len(url) > MAX_URL_LENGTH:
        raise TargetRefused(f"A webhook URL has at most {MAX_URL_LENGTH} characters.")
    if any(ord(ch) <= 0x20 or ord(ch) == 0x7F for ch in url):
        raise TargetRefused("A webhook URL cannot contain spaces or control characters.")
    try:
        parts = urlsplit(url)  # ValueError for brackets that hold no IPv6 address: http://[::1/, http://[zz]/
    except ValueError:
        raise TargetRefused("The host of this URL is not valid.") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise TargetRefused("A webhook URL starts with https:// (or http://).")
    if parts.username is not None or parts.password is not None:
        raise TargetRefused("A webhook URL cannot carry a user name or password; use the signing secret.")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
        host = (parts.hostname or "").encode("idna").decode("ascii")
    except (ValueError, UnicodeError):
        raise TargetRefused("The host or port of this URL is not valid.") from None
    if not host:
        raise TargetRefused("A webhook URL names a host.")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    shown_host = f"[{host}]" if ":" in host else host
    default_port = port == (443 if scheme == "https" else 80)
    origin = f"{scheme}://{shown_host}" + ("" if default_port else f":{port}")
    return Target(scheme=scheme, host=host, port=port, path=path, origin=origin)


@cache
def _allowed_networks(configured: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(n, strict=False) for n in configured)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_refusal(ip: IPAddress, *, allow_private: bool) -> str:
    """Why a webhook may not go to ``ip`` ('' when it may)."""
    if any(ip in net for net in _allowed_networks(tuple(settings.BERTH_WEBHOOK_ALLOWED_NETWORKS))):
        return ""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            return address_refusal(embedded, allow_private=allow_private)
    for kind, matches in (
        ("a loopback address", ip.is_loopback),
        ("a link-local address (cloud metadata services live there)", ip.is_link_local),
        ("a multicast address", ip.is_multicast),
        ("the unspecified address", ip.is_unspecified),
    ):
        if matches:
            return f"{ip} is {kind}"
    if any(ip in net for net in PRIVATE_NETWORKS):
        return "" if allow_private else f"{ip} is a private address (a platform admin may allow private addresses)"
    if ip.is_reserved or not ip.is_global:
        return f"{ip} is not a public address"
    return ""


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to now, in the resolver's order (tests may put a resolver of their own)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise TargetRefused(f"{host} does not resolve.") from None
    addresses: list[IPAddress] = []
    for info in infos:
        ip = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if ip not in addresses:
            addresses.append(ip)
    return addresses


def checked_addresses(target: Target, *, allow_private: bool) -> list[IPAddress]:
    """The addresses to connect to: all of them allowed, or TargetRefused naming the first that is not."""
    addresses = resolve(target.host, target.port)
    if not addresses:
        raise TargetRefused(f"{target.host} does not resolve.")
    for ip in addresses:
        refusal = address_refusal(ip, allow_private=allow_private)
        if not refusal:
            continue
        if target.host == str(ip):  # an address in the URL itself: nothing to hide
            raise TargetRefused(f"{refusal}; webhooks go to public addresses only.")
        raise TargetRefused(
            f"{target.host} resolves to {refusal}; webhooks go to public addresses only.",
            undetailed=f"{target.host} resolves to an address that is not public; webhooks go to public addresses "
            "only (a platform admin may allow private ones for an endpoint).",
        )
    return addresses


def check(url: str, *, allow_private: bool) -> Target:
    """A URL an endpoint may be saved with (parsed, resolved and every address allowed), or TargetRefused."""
    target = parse(url)
    checked_addresses(target, allow_private=allow_private)
    return target
