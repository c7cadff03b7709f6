"""The API's contract: what the OpenAPI schema promises is what the endpoints do, for any input.

Paging and filters refuse malformed values with field errors, not database errors; every status an
operation can answer is in the schema with its body; nullable fields, formats and bounds match.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest
import yaml
from django.urls import get_resolver

from tenants import audit
from tenants.api.pagination import CURSOR_PATTERN, MAX_LIMIT, MAX_OFFSET
from tenants.models import AuditEvent

pytestmark = pytest.mark.django_db

API = "/api/v1"
LISTS = ["teams/", "tiers/", "clusters/", "requests/", "tenants/", "audit-events/", "tokens/"]


@pytest.fixture
def schema(api, erin) -> dict:
    response = api(erin).get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi")
    assert response.status_code == 200
    return yaml.safe_load(response.content)


def operations(schema: dict):
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            yield path, method, operation


# --- paging -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=abc", "limit"),
        ("limit=-1", "limit"),
        ("limit=0", "limit"),
        ("limit=1.5", "limit"),
        ("limit=", "limit"),
        (f"limit={MAX_LIMIT + 1}", "limit"),
        ("limit=100000", "limit"),
        ("limit=99999999999999999999999", "limit"),
        ("offset=-5", "offset"),
        ("offset=x", "offset"),
        (f"offset={MAX_OFFSET + 1}", "offset"),
        ("offset=99999999999999999999", "offset"),
        ("limit=%EF%BC%95", "limit"),  # a full-width digit five: str.isdigit() says yes, int() too, the API no
    ],
)
@pytest.mark.parametrize("path", LISTS)
def test_bad_paging_is_a_field_error(api, dave, path, query, field):
    response = api(dave).get(f"{API}/{path}?{query}")
    assert response.status_code == 400, response.content
    assert list(response.json()) == [field] and isinstance(response.json()[field][0], str)


def test_paging_up_to_the_bounds_is_answered(api, alice, submit, small):
    for i in range(3):
        submit(name=f"web-{i}", tier=small)
    client = api(alice)
    page = client.get(f"{API}/requests/?limit=2&offset=1").json()
    assert page["count"] == 3 and len(page["results"]) == 2
    assert len(client.get(f"{API}/requests/?limit={MAX_LIMIT}").json()["results"]) == 3
    assert client.get(f"{API}/requests/?offset={MAX_OFFSET}").json()["results"] == []


def test_a_page_without_limit_has_the_default_size(api, alice, team_a):
    for i in range(55):
        audit.record(actor=alice, action="test.row", obj=team_a, team=team_a, after={"i": i})
    page = api(alice).get(f"{API}/audit-events/").json()
    assert len(page["results"]) == 50 and page["next"]


# --- date-time filters ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "since=9999-12-31T23:59:59-23:00",
        "until=0001-01-01T00:00:00%2B23:59",
        "since=2024-05-01T10:00:00%2B20:00",
        "until=9999-12-31T23:59:59.999999-00:01",
        "since=0001-01-01T00:00:00Z",
    ],
)
@pytest.mark.parametrize("path", ["audit-events/", "audit-events/export/"])
def test_extreme_but_valid_date_times_are_answered(api, dave, path, query):
    assert api(dave).get(f"{API}/{path}?{query}").status_code == 200


def test_offsets_postgresql_cannot_take_still_filter_correctly(api, dave, alice, team_a):
    audit.record(actor=alice, action="test.row", obj=team_a, team=team_a)
    event = AuditEvent.objects.get(action="test.row")
    at = event.at.astimezone(dt.UTC)
    # The same instant written with a +20:00 offset: 20 hours later on the clock.
    shifted = (at + dt.timedelta(hours=20)).replace(tzinfo=None).isoformat() + "+20:00"
    client = api(dave)
    found = client.get(f"{API}/audit-events/", {"since": shifted, "action": "test."}).json()["results"]
    assert [e["id"] for e in found] == [event.pk]
    later = (at + dt.timedelta(seconds=1, hours=20)).replace(tzinfo=None).isoformat() + "+20:00"
    assert client.get(f"{API}/audit-events/", {"since": later, "action": "test."}).json()["results"] == []
    assert [
        e["id"] for e in client.get(f"{API}/audit-events/", {"until": "9999-12-31T23:59:59-23:00"}).json()["results"]
    ][:1] == [AuditEvent.objects.first().pk]


@pytest.mark.parametrize("value", ["yesterday", "2024-13-01T00:00:00Z", "2024-05-01T25:00:00Z", "0000-01-01T00:00Z"])
def test_a_date_time_that_is_none_is_a_field_error(api, dave, value):
    response = api(dave).get(f"{API}/audit-events/", {"since": value})
    assert response.status_code == 400 and list(response.json()) == ["since"]


# --- the schema -------------------------------------------------------------------------------------------------


PROMETHEUS_STATUSES = {"422", "502", "503", "504"}  # Prometheus's own, in its error shape


def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def test_every_operation_documents_its_errors_with_their_bodies(schema):
    for path, method, operation in operations(schema):
        responses = operation["responses"]
        assert {"400", "401", "429"} <= set(responses), (method, path)
        bad_input = responses["400"]["content"]["application/json"]["schema"]
        own = set(responses) - {"200", "201", "202", "204", "400"}
        if "/prometheus/api/v1/" in path:  # a Prometheus data source: its query errors are Prometheus's
            assert bad_input == {"oneOf": [_ref("PrometheusError"), _ref("FieldErrors")]}, (method, path)
            assert responses["200"]["content"]["application/json"]["schema"] == _ref("PrometheusAnswer")
            for status in PROMETHEUS_STATUSES:
                assert responses[status]["content"]["application/json"]["schema"] == _ref("PrometheusError")
            own -= PROMETHEUS_STATUSES
        else:
            assert bad_input == _ref("FieldErrors"), (method, path)
        for status in own:
            assert responses[status]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/Error"
            }, (method, path, status)
        if "{id}" in path:
            assert "404" in responses, (method, path)
        if method in ("post", "patch", "delete"):
            assert "403" in responses, (method, path)
        if "{id}" in path and method == "post" and "/prometheus/" not in path and "/webhooks/" not in path:
            assert "409" in responses, (method, path)
        if "requestBody" in operation:
            assert "415" in responses, (method, path)
    assert schema["components"]["schemas"]["Error"]["required"] == ["detail"]


def test_credential_endpoints_say_yaml_and_may_be_unavailable(schema):
    for path, method in [("/api/v1/tenants/{id}/kubeconfig/", "post"), ("/api/v1/kubeconfig/", "get")]:
        responses = schema["paths"][path][method]["responses"]
        assert list(responses["200"]["content"]) == ["application/yaml"]
        assert responses["200"]["content"]["application/yaml"]["schema"] == {"$ref": "#/components/schemas/Kubeconfig"}
        assert "503" in responses
    assert list(schema["paths"]["/api/v1/audit-events/export/"]["get"]["responses"]["200"]["content"]) == ["text/csv"]


def test_paging_bounds_are_documented(schema):
    for path in LISTS:
        operation = schema["paths"][f"/api/v1/{path}"]["get"]
        parameters = {p["name"]: p["schema"] for p in operation["parameters"]}
        assert parameters["limit"] == {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 50}
        page = schema["components"]["schemas"][
            operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
        ]
        if path == "audit-events/":  # keyset paging: a cursor and a next link, no offset and no count
            assert "offset" not in parameters
            assert parameters["cursor"] == {"type": "string", "pattern": f"^{CURSOR_PATTERN}$"}
            assert page["required"] == ["next", "results"] and set(page["properties"]) == {"next", "results"}
            assert page["properties"]["next"]["nullable"] is True
        else:
            assert parameters["offset"] == {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0}
            assert "cursor" not in parameters and "count" in page["required"]


def test_the_cursor_pattern_is_exactly_what_the_audit_trail_accepts(api, alice, team_a):
    """Anything the schema's pattern allows is a position (one beyond every row's is moved to the nearest one a
    row could have); anything else is a field error."""
    audit.record(actor=alice, action="test.row", obj=team_a, team=team_a)
    client = api(alice)
    pattern = re.compile(f"^{CURSOR_PATTERN}$")
    for cursor in ["0.0", "-0.0", "1.1", "00001.00001", "9" * 19 + "." + "9" * 19, "-" + "9" * 19 + ".0"]:
        assert pattern.fullmatch(cursor)
        assert client.get(f"{API}/audit-events/", {"cursor": cursor}).status_code == 200, cursor
    everything = client.get(f"{API}/audit-events/", {"cursor": "9" * 19 + "." + "9" * 19}).json()
    assert [e["action"] for e in everything["results"]] == ["test.row"]
    for cursor in ["", "1", "1.", ".1", "1.1.1", "+1.1", "1.-1", "1e3.1", " 1.1", "1.1 ", "9" * 20 + ".1"]:
        assert not pattern.fullmatch(cursor)
        assert client.get(f"{API}/audit-events/", {"cursor": cursor}).status_code == 400, cursor


def test_nullable_fields_are_declared_nullable(schema):
    components = schema["components"]["schemas"]
    assert components["Request"]["properties"]["decided_by"]["nullable"] is True
    assert components["Request"]["properties"]["decided_at"]["nullable"] is True
    assert components["AuditEvent"]["properties"]["team"]["nullable"] is True
    assert components["ApiToken"]["properties"]["team"]["nullable"] is True
    for field in ["ready_at", "expires_at", "quota_usage_at", "isolation_report_at"]:
        assert components["Tenant"]["properties"][field]["nullable"] is True


def test_input_rules_are_in_the_schema(schema):
    components = schema["components"]["schemas"]
    label, blank = components["RequestCreateRequest"]["properties"]["name"]["oneOf"]
    assert label == {"type": "string", "maxLength": 63, "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}
    assert blank == {"type": "string", "maxLength": 0}
    assert components["KubeconfigRequest"]["properties"]["lifetime_seconds"]["minimum"] == 600
    key = {p["name"]: p for p in schema["paths"]["/api/v1/requests/"]["post"]["parameters"]}["Idempotency-Key"]
    assert key["schema"]["maxLength"] == 64 and key["in"] == "header"


def test_links_lead_from_a_new_request_to_what_can_be_done_with_it(schema):
    links = schema["paths"]["/api/v1/requests/"]["post"]["responses"]["201"]["links"]
    assert {link["operationId"] for link in links.values()} >= {
        "v1_requests_approve_create",
        "v1_requests_cancel_create",
        "v1_tenants_decommission_create",
        "v1_tenants_kubeconfig_create",
    }
    ids = {op["operationId"] for _, _, op in operations(schema)}
    for _, _, operation in operations(schema):
        for response in operation["responses"].values():
            for link in response.get("links", {}).values():
                assert link["operationId"] in ids


# --- answers match the schema -----------------------------------------------------------------------------------


def test_a_pending_request_has_no_decider_and_says_so(api, alice, submit):
    body = api(alice).get(f"{API}/requests/{submit().pk}/").json()
    assert body["decided_by"] is None and body["decided_at"] is None


def test_system_and_personal_rows_carry_a_null_team(api, dave, alice):
    audit.record(actor=None, action="test.system", obj=alice)
    (event,) = api(dave).get(f"{API}/audit-events/", {"action": "test.system"}).json()["results"]
    assert event["team"] is None


@pytest.mark.parametrize("name", ["Web", "web-", "-web", "we_b", "web\n"])
def test_a_name_that_is_no_rfc_1123_label_is_a_field_error(api, alice, cluster, name):
    body = {"team": "team-a", "name": name, "tier": "medium", "cluster": "dev"}
    response = api(alice).post(f"{API}/requests/", body, format="json")
    assert response.status_code == 400 and list(response.json()) == ["name"]


def test_a_kubeconfig_is_given_to_a_client_that_asks_for_yaml(api, alice, ready_tenant, worker_hooks):
    tenant = ready_tenant()
    response = api(alice).post(f"{API}/tenants/{tenant.pk}/kubeconfig/", HTTP_ACCEPT="application/yaml")
    assert response.status_code == 200 and response["Content-Type"] == "application/yaml"
    merged = api(alice).get(f"{API}/kubeconfig/", HTTP_ACCEPT="application/yaml")
    assert merged.status_code == 200 and merged["Content-Type"] == "application/yaml"


def test_a_kubeconfig_error_is_json_even_to_a_client_that_asks_for_yaml(api, alice, submit):
    response = api(alice).post(f"{API}/tenants/{submit().tenant_id}/kubeconfig/", HTTP_ACCEPT="application/yaml")
    assert response.status_code == 409 and response["Content-Type"] == "application/json"
    assert "detail" in response.json()


def test_the_export_is_given_to_a_client_that_asks_for_csv(api, alice):
    response = api(alice).get(f"{API}/audit-events/export/", HTTP_ACCEPT="text/csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")


@pytest.mark.parametrize("query", ["", "?format=bogus"])
def test_an_accept_header_the_api_cannot_meet_gets_json_not_406(api, alice, query):
    response = api(alice).get(f"{API}/me/{query}", HTTP_ACCEPT="application/yaml")
    assert response.status_code == 200 and response.json()["username"] == "alice"


def test_an_api_url_no_route_matches_is_a_json_404(api, alice):
    response = api(alice).post(f"{API}/requests/0.5/approve/")
    assert response.status_code == 404 and response.json() == {"detail": "Not found."}
    assert api(alice).get("/no-such-page/").status_code == 404  # pages keep their HTML page


def test_the_api_serves_exactly_the_paths_its_schema_documents(schema):
    # Each route of /api/v1/ as a path with its parameters blanked, against the schema's paths likewise.
    (api_urls,) = [p for p in get_resolver().url_patterns if str(p.pattern) == "api/v1/"]
    served = set()
    for route in api_urls.url_patterns:
        text = re.sub(r"\(\?P<\w+>[^)]*\)", "{}", str(route.pattern))  # the router's: ^tenants/(?P<pk>[^/.]+)/sleep/$
        text = re.sub(r"<(?:\w+:)?\w+>", "{}", text)  # path()'s: teams/<slug:slug>/costs/
        served.add(f"{API}/{text.removeprefix('^').removesuffix('$')}")
    documented = {re.sub(r"\{\w+\}", "{}", path) for path in schema["paths"] if path.startswith(f"{API}/")}
    assert served == documented


@pytest.mark.parametrize(
    "path",
    [
        "",
        ".json",
        "tenants.json",
        "requests.api",
        "requests/00000000-0000-4000-8000-000000000000.json",
        "requests/00000000-0000-4000-8000-000000000000/cancel.json",
    ],
)
def test_a_format_suffix_or_the_api_root_is_no_route(api, alice, path):
    response = api(alice).get(f"{API}/{path}")
    assert response.status_code == 404 and response.json() == {"detail": "Not found."}


def test_an_empty_date_time_filter_is_a_field_error(api, dave):
    response = api(dave).get(f"{API}/audit-events/?until=")
    assert response.status_code == 400 and list(response.json()) == ["until"]


@pytest.mark.parametrize("path", ["audit-events/?team=a%00b", "audit-events/?actor=%00", "tenants/?cluster=x%00"])
def test_a_nul_character_in_a_text_filter_matches_nothing(api, dave, alice, team_a, path):
    audit.record(actor=alice, action="test.row", obj=team_a, team=team_a)
    response = api(dave).get(f"{API}/{path}")
    assert response.status_code == 200 and response.json()["results"] == []


def test_an_empty_team_is_refused_not_taken_for_none(api, alice):
    form = "application/x-www-form-urlencoded"
    response = api(alice).post(f"{API}/tokens/", "name=ci&team=", content_type=form)
    assert response.status_code == 400 and list(response.json()) == ["team"]


@pytest.mark.parametrize("query", ["status=", "action=", "status=nope", "tenants:status=", "tenants:status=nope"])
def test_a_blank_or_unknown_choice_is_a_field_error(api, dave, query):
    path, _, query = query.rpartition(":")
    response = api(dave).get(f"{API}/{path or 'requests'}/?{query}")
    assert response.status_code == 400 and list(response.json()) == [query.split("=")[0]]


@pytest.mark.parametrize(
    "path",
    [
        "requests/?limit=5&limit=x",
        "audit-events/?until=x&until=2024-01-01T00:00:00Z",
        "kubeconfig/?lifetime_seconds=x&lifetime_seconds=",
    ],
)
def test_a_parameter_given_twice_is_a_field_error(api, alice, path):
    response = api(alice).get(f"{API}/{path}")
    assert response.status_code == 400 and list(response.json()) == [path.split("?")[1].split("=")[0]]


def test_a_list_parameter_may_be_given_twice(api, alice):
    assert api(alice).get(f"{API}/tenants/?status=ready&status=failed").status_code == 200


def test_a_blank_lifetime_is_a_field_error(api, alice):
    response = api(alice).get(f"{API}/kubeconfig/?lifetime_seconds=")
    assert response.status_code == 400 and list(response.json()) == ["lifetime_seconds"]


def test_an_unknown_field_is_refused_not_ignored(api, alice, ready_tenant, worker_hooks):
    tenant = ready_tenant()
    response = api(alice).post(f"{API}/tenants/{tenant.pk}/kubeconfig/", {"lifetime_second": 900}, format="json")
    assert response.status_code == 400 and response.json() == {"lifetime_second": ["Unknown field."]}


def test_a_multipart_body_is_415(api, alice, cluster):
    response = api(alice).post(f"{API}/requests/", {"team": "team-a", "name": "web"}, format="multipart")
    assert response.status_code == 415
