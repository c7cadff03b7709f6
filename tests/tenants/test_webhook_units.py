"""Webhook pure logic: which addresses and URLs are refused, signatures, payloads (no database, no network)."""

from __future__ import annotations

import ipaddress
import time

import pytest
from standardwebhooks.webhooks import Webhook

from tenants.webhooks import payloads, signing, targets
from tenants.webhooks.targets import TargetRefused
from tests.plugins.webhooks import documented_verifier

REFUSED_ALWAYS = [
    ("127.0.0.2", "loopback"),
    ("::1", "loopback"),
    ("169.254.169.254", "link-local"),  # the cloud metadata service
    ("fe80::1", "link-local"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("::ffff:127.0.0.2", "loopback"),  # IPv4-mapped
    ("::ffff:169.254.169.254", "link-local"),
    ("2002:a9fe:a9fe::1", "link-local"),  # 6to4 around 169.254.169.254
    ("64:ff9b::a9fe:a9fe", "link-local"),  # NAT64 around 169.254.169.254
    ("240.0.0.1", "not a public address"),
    ("255.255.255.255", "not a public address"),
    ("198.18.0.1", "not a public address"),
    ("192.0.2.10", "not a public address"),
    ("2001:db8::1", "not a public address"),
]
PRIVATE = ["10.1.2.3", "172.16.0.1", "172.31.255.254", "192.168.1.1", "100.64.0.1", "fd00::1", "::ffff:10.0.0.1"]
PUBLIC = ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"]


@pytest.mark.parametrize(("address", "kind"), REFUSED_ALWAYS)
def test_loopback_link_local_multicast_and_reserved_addresses_are_refused_even_with_the_private_allowance(
    address, kind
):
    ip = ipaddress.ip_address(address)
    for allow_private in (False, True):
        assert kind in targets.address_refusal(ip, allow_private=allow_private)


@pytest.mark.parametrize("address", PRIVATE)
def test_private_addresses_need_the_admins_allowance(address):
    ip = ipaddress.ip_address(address)
    assert "private" in targets.address_refusal(ip, allow_private=False)
    assert targets.address_refusal(ip, allow_private=True) == ""


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_are_allowed(address):
    assert targets.address_refusal(ipaddress.ip_address(address), allow_private=False) == ""


def test_the_operators_allowed_networks_are_the_only_way_to_loopback(settings):
    assert targets.address_refusal(ipaddress.ip_address("127.0.0.1"), allow_private=False) == ""  # test settings
    settings.BERTH_WEBHOOK_ALLOWED_NETWORKS = []
    assert "loopback" in targets.address_refusal(ipaddress.ip_address("127.0.0.1"), allow_private=True)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://hooks.example.test/x", "https://"),
        ("file:///etc/passwd", "https://"),
        ("gopher://127.0.0.1:6379/_FLUSHALL", "https://"),
        ("https://user:pw@hooks.example.test/x", "user name or password"),
        ("https://hooks.example.test/x y", "spaces or control"),
        ("https://hooks.example.test/x\r\nHost: evil", "spaces or control"),
        ("https:///nohost", "names a host"),
        ("https://hooks.example.test:99999/", "not valid"),
        ("https://hooks.example.test/" + "a" * 2000, "at most 2000"),
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        ("http://[::ffff:169.254.169.254]/", "link-local"),
        ("http://2130706434:8080/", "127.0.0.2 is a loopback"),  # a decimal IPv4 literal
        ("http://0x7f000002/", "127.0.0.2 is a loopback"),  # a hexadecimal one
        ("http://0/", "unspecified"),
        ("http://[::1]:8080/", "loopback"),
        ("http://10.0.0.5/hook", "private"),
    ],
)
def test_urls_that_cannot_be_webhooks_are_refused_with_the_reason(url, says):
    with pytest.raises(TargetRefused) as refused:
        targets.check(url, allow_private=False)
    assert says in str(refused.value)


def test_a_refusal_names_the_host_never_the_path():
    with pytest.raises(TargetRefused) as refused:
        targets.check("http://169.254.169.254/services/T0/B0/SECRET-PATH", allow_private=False)
    assert "SECRET-PATH" not in str(refused.value)
    assert targets.parse("https://hooks.slack.com/services/T0/B0/SECRET-PATH").origin == "https://hooks.slack.com"
    assert targets.parse("http://[::1]:8080/x?y=1").origin == "http://[::1]:8080"


def test_signatures_verify_with_the_standard_webhooks_library_and_the_documented_snippet():
    secret = signing.new_secret()
    body = payloads.body({"type": "tenant.ready", "text": "naïve ✓"})
    now = int(time.time())
    headers = signing.headers(
        secret=secret, message_id="evt-1", timestamp=now, body=body, event="tenant.ready", delivery_id="d", sequence=3
    )
    assert Webhook(secret).verify(body, headers)["type"] == "tenant.ready"
    verify = documented_verifier()
    lower = {k.lower(): v for k, v in headers.items()}
    assert verify(secret, lower, body)["text"] == "naïve ✓"
    with pytest.raises(ValueError, match="bad signature"):
        verify(secret, lower, body.replace(b"ready", b"fails"))
    with pytest.raises(ValueError, match="bad signature"):
        verify(signing.new_secret(), lower, body)
    stale = signing.headers(
        secret=secret, message_id="evt-1", timestamp=now - 600, body=body, event="x", delivery_id="d", sequence=3
    )
    with pytest.raises(ValueError, match="too old"):
        verify(secret, {k.lower(): v for k, v in stale.items()}, body)


@pytest.mark.parametrize(
    ("secret", "says"),
    [
        ("hunter2", "starts with whsec_"),
        ("whsec_not base64!", "base64"),
        ("whsec_" + "QUJD", "24 to 64 bytes"),
    ],
)
def test_a_secret_the_receiver_cannot_use_is_refused(secret, says):
    assert says in signing.secret_error(secret)


def test_generated_secrets_are_distinct_and_usable():
    first, second = signing.new_secret(), signing.new_secret()
    assert first != second and signing.secret_error(first) == ""
