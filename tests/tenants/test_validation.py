"""tenants.validation: tenant names are DNS-1123 labels that fit, with the cluster prefix, in 63 characters."""

from __future__ import annotations

import pytest

from tenants.validation import tenant_name_errors

RESERVED = ["default", "berth", "berth-system"]


def errors(name: str, prefix: str = "") -> list[str]:
    return tenant_name_errors(name, prefix=prefix, reserved=RESERVED)


@pytest.mark.parametrize("name", ["web", "a", "0", "team-a-ci-42", "x" * 63, "a-b"])
def test_valid_dns1123_labels_are_accepted(name):
    assert errors(name) == []


def test_empty_name_is_required():
    assert errors("") == ["A name is required."]


@pytest.mark.parametrize(
    "name",
    ["Web", "web_1", "-web", "web-", "web.api", "wéb", "web api", " web", "web\n", "web\x00", "\nweb", "web\r\n"],
)
def test_names_outside_dns1123_are_refused(name):
    assert len(errors(name)) == 1 and "RFC 1123" in errors(name)[0]


def test_trailing_newline_is_not_a_valid_label():
    # Python's '$' matches before a final newline: the check must anchor at the true end.
    assert errors("web\n")


def test_63_characters_is_the_limit():
    assert errors("x" * 63) == []
    assert "64 characters" in errors("x" * 64)[0]


def test_the_cluster_prefix_counts_toward_63_characters():
    assert errors("x" * 58, prefix="dev-") == []  # 62
    assert errors("x" * 59, prefix="dev-") == []  # 63
    too_long = errors("x" * 60, prefix="dev-")
    assert len(too_long) == 1 and "64 characters" in too_long[0] and "'dev-'" in too_long[0]


@pytest.mark.parametrize("name", ["default", "berth", "berth-system"])
def test_reserved_names_are_refused(name):
    assert errors(name) == [f"'{name}' is reserved."]


def test_a_name_that_becomes_reserved_with_the_prefix_is_refused():
    assert errors("system", prefix="berth-") == ["'system' is reserved."]


@pytest.mark.parametrize("name", ["kube-x", "kube-system", "openshift-x", "openshift-monitoring"])
def test_kube_and_openshift_prefixes_are_reserved(name):
    assert any("kube-" in e for e in errors(name))


def test_a_cluster_prefix_of_kube_makes_every_name_reserved():
    assert any("reserved" in e for e in errors("web", prefix="kube-"))


@pytest.mark.parametrize("name", ["kube", "kubeflow", "openshiftish", "mykube-x"])
def test_names_that_merely_contain_kube_are_fine(name):
    assert errors(name) == []


# --- A tier's egress allow-list -----------------------------------------------------------------------------


def test_egress_rules_name_a_network_and_optional_ports():
    from tenants.validation import egress_rule_errors

    assert egress_rule_errors([]) == []
    assert egress_rule_errors([{"cidr": "10.20.0.0/16", "ports": [{"protocol": "TCP", "port": 5432}]}]) == []
    assert egress_rule_errors([{"cidr": "192.0.2.7/32"}, {"cidr": "2001:db8::/64", "ports": [{"port": 443}]}]) == []


@pytest.mark.parametrize(
    ("rules", "says"),
    [
        ("10.0.0.0/8", "A list of rules"),
        ([{"cidr": "10.0.0.1/8"}], "host bits zero"),
        ([{"cidr": "not-a-network"}], "cidr must be a network"),
        ([{"cidr": "0.0.0.0/0"}], "open-egress"),
        ([{"cidr": "10.0.0.0/8", "port": 80}], "unknown key(s) port"),
        ([{"cidr": "10.0.0.0/8", "ports": [{"port": 0}]}], "1-65535"),
        ([{"cidr": "10.0.0.0/8", "ports": [{"port": 80, "protocol": "ICMP"}]}], "TCP, UDP or SCTP"),
        ([{"cidr": "10.0.0.0/8", "ports": [{"port": "80"}]}], "each port is"),
        ([{"cidr": "10.0.0.0/8", "ports": [{"port": True}]}], "each port is"),
        ([{"cidr": "10.0.0.0/8", "ports": "80"}], "ports must be a list"),
    ],
)
def test_bad_egress_rules_say_what_is_wrong(rules, says):
    from tenants.validation import egress_rule_errors

    found = egress_rule_errors(rules)
    assert found and any(says in error for error in found), found
