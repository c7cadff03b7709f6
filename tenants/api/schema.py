"""OpenAPI descriptions of Berth's two API authentication schemes."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.api.authentication.ApiTokenAuthentication"
    name = "portalToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "A portal API token: `Token brt_…` (create one on the API tokens page).",
        }


class OidcBearerScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.api.authentication.OidcBearerAuthentication"
    name = "oidcBearer"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "bearerFormat": "JWT",
            "description": "An OIDC access token from the configured issuer with this API's audience.",
        }


# --- Error responses and links ------------------------------------------------------------------------------------
# Every operation documents each status it can answer, with the body DRF's exception handler writes. Which ones
# come from where: 400 bad input (and a bearer token whose claims cannot make a user), 401 missing or refused
# credentials, 429 too many failed sign-ins from the address or too many writes; 403 a write refused (by the
# services or, for browser sessions, the CSRF check); 404 an object that is not there or not the caller's;
# 415 a body in a media type the API does not read; 409 a transition no longer possible (and a reused
# Idempotency-Key); 503 the portal's own database away (any operation, with Retry-After), or a cluster that cannot be
# reached while a credential is issued.

ERROR_SCHEMA = {
    "type": "object",
    "properties": {"detail": {"type": "string"}},
    "required": ["detail"],
}
FIELD_ERRORS_SCHEMA = {
    "type": "object",
    "description": "Messages by field name; `non_field_errors` for the body as a whole, `detail` for a body "
    "that could not be parsed at all.",
    "properties": {
        "detail": {"type": "string"},
        "non_field_errors": {"type": "array", "items": {"type": "string"}},
    },
    "additionalProperties": {"type": "array", "items": {"type": "string"}},
}
# A tenant's metrics API (tenants/api/prometheus.py) answers as Prometheus does, and its query errors too.
PROMETHEUS_ANSWER_SCHEMA = {
    "type": "object",
    "description": "Prometheus's answer, as it gave it (https://prometheus.io/docs/prometheus/latest/querying/api/).",
    "properties": {
        "status": {"type": "string", "enum": ["success"]},
        "data": {"description": "A result (query, query_range), series, or names (labels, label values)."},
        "warnings": {"type": "array", "items": {"type": "string"}},
        "infos": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["status", "data"],
}
PROMETHEUS_ERROR_SCHEMA = {
    "type": "object",
    "description": "Prometheus's error shape, from Prometheus or from Berth's own bounds.",
    "properties": {
        "status": {"type": "string", "enum": ["error"]},
        "errorType": {"type": "string"},
        "error": {"type": "string"},
    },
    "required": ["status", "errorType", "error"],
}
# A kubeconfig (YAML), as kubectl reads it: what the credential endpoints return.
_NAMED_LIST = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
        "additionalProperties": True,
    },
}
KUBECONFIG_SCHEMA = {
    "type": "object",
    "description": "A kubeconfig file: clusters, users and contexts; a user's credential expires (short-lived).",
    "properties": {
        "apiVersion": {"type": "string", "enum": ["v1"]},
        "kind": {"type": "string", "enum": ["Config"]},
        "clusters": _NAMED_LIST,
        "users": _NAMED_LIST,
        "contexts": _NAMED_LIST,
        "current-context": {"type": "string"},
        "preferences": {"type": "object"},
    },
    "required": ["apiVersion", "kind", "clusters", "users", "contexts"],
}
_DESCRIPTIONS = {
    "400": "Invalid input: messages by field.",
    "401": "No credentials, or credentials that were refused.",
    "403": "Not allowed to do this.",
    "404": "No such object, or not visible to the caller.",
    "409": "No longer possible: the object changed state, or the Idempotency-Key was used for another request.",
    "415": "The body's media type is not JSON, a form or multipart.",
    "429": "Too many requests: wait for the number of seconds in Retry-After.",
    "503": "The portal's database, or the cluster, could not be reached: try again (after Retry-After seconds, when "
    "given). A POST repeated with the same Idempotency-Key is not applied twice.",
}
_HEADERS = {
    "401": {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "The schemes the API accepts."}},
    "429": {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds to wait."}},
    "503": {"Retry-After": {"schema": {"type": "integer"}, "description": "Seconds to wait (the database is away)."}},
}
# Statuses particular to one operation, beyond what its method and path imply.
_EXTRA_STATUSES = {
    "v1_requests_create": {"409"},
    "v1_kubeconfig_retrieve": {"403"},
    "v1_teams_webhooks_test_create": {"409"},  # an earlier test event still pending
}


def error_statuses(*, operation_id: str, method: str, path: str, has_body: bool) -> set[str]:
    statuses = {"400", "401", "429", "503"} | _EXTRA_STATUSES.get(operation_id, set())
    if "{id}" in path or "{slug}" in path:
        statuses.add("404")
    if method in ("post", "patch", "delete"):
        statuses.add("403")
        # A metrics query changes nothing; a webhook endpoint has no state to move from.
        if method == "post" and "{id}" in path and "/prometheus/" not in path and "/webhooks/" not in path:
            statuses.add("409")
    if has_body:
        statuses.add("415")
    return statuses


def _link(operation_id: str, id_expression: str, description: str) -> dict:
    return {"operationId": operation_id, "parameters": {"id": id_expression}, "description": description}


# What a client (and the fuzzer's stateful phase) can do next with what an operation returned.
_REQUEST_LINKS = {
    "GetRequest": _link("v1_requests_retrieve", "$response.body#/id", "The request."),
    "ApproveRequest": _link("v1_requests_approve_create", "$response.body#/id", "Approve it (approvers)."),
    "RejectRequest": _link("v1_requests_reject_create", "$response.body#/id", "Reject it (approvers)."),
    "CancelRequest": _link("v1_requests_cancel_create", "$response.body#/id", "Cancel it (the requester)."),
    "AcceptTransfer": _link("v1_requests_accept_create", "$response.body#/id", "Accept a transfer (receiving owners)."),
    "DeclineTransfer": _link(
        "v1_requests_decline_create", "$response.body#/id", "Decline a transfer (receiving owners)."
    ),
    "GetTenant": _link("v1_tenants_retrieve", "$response.body#/tenant", "The tenant it is about."),
    "DecommissionTenant": _link("v1_tenants_decommission_create", "$response.body#/tenant", "Decommission it."),
    "IssueKubeconfig": _link("v1_tenants_kubeconfig_create", "$response.body#/tenant", "A kubeconfig for it."),
}
_TENANT_LINKS = {
    "DecommissionTenant": _link("v1_tenants_decommission_create", "$response.body#/id", "Decommission it."),
    "IssueKubeconfig": _link("v1_tenants_kubeconfig_create", "$response.body#/id", "A kubeconfig for it."),
    "RetryTenant": _link("v1_tenants_retry_create", "$response.body#/id", "Retry a failed tenant."),
    "CheckIsolation": _link("v1_tenants_isolation_check_create", "$response.body#/id", "Re-check isolation."),
    "GetRightsizing": _link("v1_tenants_rightsizing_retrieve", "$response.body#/id", "Its right-sizing suggestion."),
    "SleepTenant": _link("v1_tenants_sleep_create", "$response.body#/id", "Put it to sleep."),
    "WakeTenant": _link("v1_tenants_wake_create", "$response.body#/id", "Wake it."),
    "TransferTenant": _link("v1_tenants_transfer_create", "$response.body#/id", "Offer it to another team."),
}
_LINKS = {
    ("v1_requests_create", "201"): _REQUEST_LINKS,
    ("v1_requests_retrieve", "200"): _REQUEST_LINKS,
    ("v1_requests_approve_create", "200"): _REQUEST_LINKS,
    ("v1_tenants_transfer_create", "201"): _REQUEST_LINKS,
    ("v1_tenants_retrieve", "200"): _TENANT_LINKS,
    ("v1_tokens_create", "201"): {
        "RevokeToken": _link("v1_tokens_revoke_create", "$response.body#/id", "Revoke it."),
    },
}


# --- Request bodies -------------------------------------------------------------------------------------------------
# DRF's text fields refuse a NUL character (PostgreSQL cannot store one) and trim surrounding whitespace before
# checking that a required one is not blank; the schema says so with a pattern. What DRF and Python's
# str.strip() count as whitespace is \s plus the separators U+001C..U+001F and U+0085.
NO_NUL = "^[^\\u0000]*$"
NOT_BLANK = "^[^\\u0000]*[^\\u0000\\s\\u001c-\\u001f\\u0085][^\\u0000]*$"
_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


def _describe_text_rules(component: dict) -> None:
    component["additionalProperties"] = False  # tenants.api.serializers.Input
    for field in component.get("properties", {}).values():
        if field.get("type") != "string" or field.get("readOnly") or {"enum", "format", "pattern"} & set(field):
            continue
        field["pattern"] = NOT_BLANK if field.get("minLength", 0) >= 1 else NO_NUL


def _form_variant(schemas: dict, name: str) -> str:
    """A form has no null: an empty field is the default. The form encodings get the body without nulls."""
    component = schemas[name]
    nullable = [key for key, field in component.get("properties", {}).items() if field.get("nullable")]
    if not nullable:
        return name
    form = {**component, "properties": dict(component["properties"])}
    for key in nullable:
        form["properties"][key] = {k: v for k, v in component["properties"][key].items() if k != "nullable"}
    schemas[f"{name}Form"] = form
    return f"{name}Form"


def add_errors_and_links(result: dict, generator, request, public) -> dict:
    """drf-spectacular post-processing: the error responses, links and request body rules described above."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    for name, component in list(schemas.items()):
        if name.endswith("Request"):  # COMPONENT_SPLIT_REQUEST: what clients send
            _describe_text_rules(component)
    schemas["Error"] = ERROR_SCHEMA
    schemas["FieldErrors"] = FIELD_ERRORS_SCHEMA
    schemas["Kubeconfig"] = KUBECONFIG_SCHEMA
    schemas["PrometheusAnswer"] = PROMETHEUS_ANSWER_SCHEMA
    schemas["PrometheusError"] = PROMETHEUS_ERROR_SCHEMA
    for path, operations in result.get("paths", {}).items():
        for method, operation in operations.items():
            for media_type, body in operation.get("requestBody", {}).get("content", {}).items():
                ref = body["schema"].get("$ref", "")
                if media_type in _FORMS and ref.startswith("#/components/schemas/"):
                    body["schema"] = {"$ref": "#/components/schemas/" + _form_variant(schemas, ref.rsplit("/", 1)[1])}
            responses = operation["responses"]
            yaml_file = responses.get("200", {}).get("content", {}).get("application/yaml")
            if yaml_file is not None:
                yaml_file["schema"] = {"$ref": "#/components/schemas/Kubeconfig"}
            statuses = error_statuses(
                operation_id=operation["operationId"], method=method, path=path, has_body="requestBody" in operation
            )
            for status in sorted(statuses):
                body = "FieldErrors" if status == "400" else "Error"
                responses.setdefault(
                    status,
                    {
                        "description": _DESCRIPTIONS[status],
                        "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{body}"}}},
                        **({"headers": _HEADERS[status]} if status in _HEADERS else {}),
                    },
                )
            for status, response in responses.items():
                links = _LINKS.get((operation["operationId"], status))
                if links:
                    response["links"] = links
    return result
