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
