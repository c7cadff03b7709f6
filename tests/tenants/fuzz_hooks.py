"""Schemathesis hooks of the fuzz stage (test_api_fuzz.py), loaded through SCHEMATHESIS_HOOKS.

A generated create request nearly always asks for an expiry past its tier's maximum or a kind the cluster
does not offer, or names an existing tenant that does not exist, all refused as they should be; then nothing
is ever created and the stateful phase has nothing to approve, cancel or decommission. So about half of the
well-formed create requests (positive cases with a purpose of even length) name no tenant and ask for the
default expiry and a namespace: still valid, and now often accepted. Negative cases are left
as generated.
"""

from __future__ import annotations

import schemathesis


@schemathesis.hook("map_case").apply_to(name="POST /api/v1/requests/")  # type: ignore[attr-defined]
def submittable(context, case):
    meta = case.meta
    body = case.body
    if meta is None or not meta.generation.mode.is_positive or not isinstance(body, dict):
        return case
    if body.get("action", "create") == "create" and len(str(body.get("purpose", ""))) % 2 == 0:
        body.pop("tenant", None)  # a create request names no existing tenant
        body["requested_expiry"] = None if case.media_type == "application/json" else ""
        body["kind"] = "namespace"
    return case
