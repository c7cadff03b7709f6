"""Pure checks of user input that need no database."""

from __future__ import annotations

import re

DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_LABEL_MESSAGE = (
    "Use lower-case letters, digits and '-', starting and ending with a letter or digit (RFC 1123 label)."
)
RESERVED_PREFIXES = ("kube-", "openshift-")


def tenant_name_errors(name: str, *, prefix: str, reserved: list[str]) -> list[str]:
    """Why ``name`` cannot be a tenant name on a cluster that adds ``prefix``; empty when it can."""
    if not name:
        return ["A name is required."]
    # fullmatch, not match with '$': '$' also matches before a trailing newline.
    if not DNS1123_LABEL.fullmatch(name):
        return [DNS1123_LABEL_MESSAGE]
    full = prefix + name
    errors = []
    if len(full) > 63:
        errors.append(
            f"'{full}' is {len(full)} characters; at most 63 are allowed including the cluster's prefix '{prefix}'."
        )
    if name in reserved or full in reserved:
        errors.append(f"'{name}' is reserved.")
    if full.startswith(RESERVED_PREFIXES) or name.startswith(RESERVED_PREFIXES):
        errors.append("Names starting with 'kube-' or 'openshift-' are reserved.")
    return errors


DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DOMAIN_PLACEHOLDERS = ("namespace", "tenant", "team")


def ingress_domain_template_errors(templates: object) -> list[str]:
    """Why ``templates`` cannot be a cluster's Ingress domain templates; empty when they can.

    Each template must name ``{namespace}`` (namespaces are unique on a cluster, so each tenant's
    domain is its own) and render to a DNS name.
    """
    if not isinstance(templates, list) or not all(isinstance(t, str) for t in templates):
        return ['A list of DNS suffix templates, e.g. ["{namespace}.apps.example.com"].']
    errors = []
    for template in templates:
        try:
            rendered = template.format(**dict.fromkeys(DOMAIN_PLACEHOLDERS, "sample"))
        except (KeyError, IndexError, ValueError):
            errors.append(f"{template!r} may use only {', '.join('{' + p + '}' for p in DOMAIN_PLACEHOLDERS)}.")
            continue
        if "{namespace}" not in template:
            errors.append(f"{template!r} must contain {{namespace}}, so no two tenants share a domain.")
        elif not DNS_SUBDOMAIN.fullmatch(rendered):
            errors.append(f"{template!r} does not make a DNS name (lower-case letters, digits, '-' and '.').")
    return errors


EGRESS_PROTOCOLS = ("TCP", "UDP", "SCTP")
EGRESS_EXAMPLE = '[{"cidr": "10.20.0.0/16", "ports": [{"protocol": "TCP", "port": 5432}]}]'


def egress_rule_errors(rules: object) -> list[str]:
    """Why ``rules`` cannot be a tier's egress allow-list; empty when it can.

    Each rule names one CIDR and, optionally, the ports allowed there (none: every port). ``0.0.0.0/0`` is
    refused: that is the open-egress network profile, which says so by its name.
    """
    import ipaddress

    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        return [f"A list of rules, e.g. {EGRESS_EXAMPLE}."]
    errors = []
    for index, rule in enumerate(rules, 1):
        unknown = set(rule) - {"cidr", "ports"}
        if unknown:
            errors.append(f"Rule {index}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; use cidr and ports.")
        cidr = rule.get("cidr")
        try:
            network = ipaddress.ip_network(cidr, strict=True) if isinstance(cidr, str) else None
        except ValueError:
            network = None
        if network is None:
            errors.append(f"Rule {index}: cidr must be a network such as 10.20.0.0/16 (host bits zero).")
        elif network.prefixlen == 0:
            errors.append(f"Rule {index}: {cidr} is every address; use the open-egress network profile instead.")
        ports = rule.get("ports", [])
        if not isinstance(ports, list) or not all(isinstance(p, dict) for p in ports):
            errors.append(f'Rule {index}: ports must be a list such as [{{"protocol": "TCP", "port": 5432}}].')
            continue
        for port in ports:
            number, protocol = port.get("port"), port.get("protocol", "TCP")
            if set(port) - {"port", "protocol"} or not isinstance(number, int) or isinstance(number, bool):
                errors.append(f"Rule {index}: each port is {{'protocol': 'TCP', 'port': 5432}}.")
            elif not 1 <= number <= 65535 or protocol not in EGRESS_PROTOCOLS:
                errors.append(f"Rule {index}: port {number}/{protocol} must be 1-65535 over TCP, UDP or SCTP.")
    return errors


def validate_egress_rules(rules: object) -> None:
    """A model field validator: refuses what ``egress_rule_errors`` refuses."""
    from django.core.exceptions import ValidationError

    errors = egress_rule_errors(rules)
    if errors:
        raise ValidationError(errors)


def time_zone_error(name: object) -> str:
    """Why ``name`` is not an IANA time zone this machine knows (e.g. ``Europe/Berlin``), or '' when it is."""
    import zoneinfo

    if not isinstance(name, str) or not name or len(name) > 64 or "\x00" in name:
        return "An IANA time zone name, e.g. Europe/Berlin or UTC."
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        return f"Unknown time zone {name[:64]!r}; use an IANA name such as Europe/Berlin or UTC."
    return ""


def validate_time_zone(name: object) -> None:
    """A model field validator: refuses what ``time_zone_error`` refuses."""
    from django.core.exceptions import ValidationError

    error = time_zone_error(name)
    if error:
        raise ValidationError(error)
