"""The public API's answers, byte for byte, on a fixed data set: every list and detail endpoint, for every kind of
caller, compared with the answers recorded in ``api_answers.json``.

What the lists and details say is the contract; how they are built may change. A change that alters an answer on
purpose records them again (``BERTH_RECORD_API_ANSWERS=1``) and shows the difference in its diff.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import itertools
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from django.utils import timezone

from tenants.models import ApiToken, AuditEvent, Team, Tenant, TenantRequest, User

ANSWERS = Path(__file__).with_name("api_answers.json")
API = "/api/v1"
START = dt.datetime(2026, 3, 1, 9, 0, 0, tzinfo=dt.UTC)
NOW = dt.datetime(2026, 3, 20, 12, 0, 0, 123456, tzinfo=dt.UTC)  # while the answers are read


@pytest.fixture
def fixed_ids_and_clock(monkeypatch) -> Iterator[dict[str, bool]]:
    """Ids and instants the same on every run: UUIDs counted from 1, sequences that start at 1 (the test resets
    them), and a clock that says ``START`` while the data is written and ``NOW`` once it is read. (Not a clock that
    ticks at every reading: how often the code reads it depends on what ran before in the process.)"""
    for model in (Tenant, TenantRequest):
        counter = itertools.count(1 if model is Tenant else 1001)
        field = model._meta.get_field("id")
        monkeypatch.setattr(field, "_get_default", lambda c=counter: uuid.UUID(int=next(c)))
    clock = {"frozen": False}

    def now() -> dt.datetime:
        return NOW if clock["frozen"] else START

    with mock.patch.object(timezone, "now", now):
        yield clock


@pytest.fixture
def data_set(fixed_ids_and_clock, varied, dave, erin, alice, team_a) -> dict[str, Any]:
    """``varied`` (two teams' tenants, requests and audit events with every kind of value), a transfer offered
    to team-b, and alice's tokens; then the clock stops."""
    team_b = Team.objects.get(slug="team-b")
    bob = User.objects.get(username="bob")
    web = Tenant.objects.get(name="t-4")
    TenantRequest.objects.filter(tenant=web, status="pending").update(status="cancelled")
    TenantRequest.objects.create(
        action="transfer",
        name=web.name,
        team=web.team,
        tier=web.tier,
        cluster=web.cluster,
        tenant=web,
        purpose="moving on",
        requested_by=alice,
        target_team=team_b,
        accepted_by=bob,
        accepted_at=START,
    )
    expires = START + dt.timedelta(days=30)
    ApiToken.objects.create(user=alice, name="mine", prefix="brt_aaaa0001", digest="0" * 64, expires_at=expires)
    team_token = ApiToken.objects.create(
        user=alice, team=team_a, name="ci", prefix="brt_aaaa0002", digest="1" * 64, expires_at=expires
    )
    ApiToken.objects.create(user=bob, name="bobs", prefix="brt_bbbb0001", digest="2" * 64, expires_at=expires)
    fixed_ids_and_clock["frozen"] = True
    return {"team_token": team_token}


def _urls(tenants: list[Tenant], requests: list[TenantRequest], events: list[AuditEvent]) -> list[str]:
    lists = [
        "/me/",
        "/teams/",
        "/tiers/",
        "/clusters/",
        "/tokens/",
        "/tenants/",
        "/tenants/?limit=5",
        "/tenants/?limit=5&offset=5",
        "/tenants/?limit=5&offset=30",
        "/tenants/?offset=200",
        "/tenants/?team=team-b",
        "/tenants/?team=nobody",
        "/tenants/?status=ready&status=failed",
        "/tenants/?cluster=edge&limit=3",
        "/tenants/?limit=0",
        "/requests/",
        "/requests/?limit=7&offset=7",
        "/requests/?status=pending",
        "/requests/?action=create&team=team-a",
        "/requests/?action=transfer",
        "/audit-events/",
        "/audit-events/?limit=7",
        "/audit-events/?team=team-a",
        "/audit-events/?actor=alice&limit=3",
        "/audit-events/?action=test.a",
        "/audit-events/?object_type=tenant&object_id=3",
        "/audit-events/?since=2026-03-01T09:00:00Z&until=2026-03-01T09:00:01Z",
        "/audit-events/?until=2026-03-01T09:00:00Z",
        "/audit-events/?cursor=nonsense",
        "/audit-events/export/",
        "/teams/team-a/costs/?month=2026-03",
        "/teams/team-b/costs/?month=2026-03",
    ]
    details = [f"/tenants/{t.pk}/" for t in tenants] + [f"/requests/{r.pk}/" for r in requests]
    # Past the first page of the trail, at a tie and in the middle.
    cursors = [f"/audit-events/?limit=5&cursor={_cursor(e)}" for e in events[4:40:9]]
    others = [f"/tenants/{t.pk}/{what}/" for t in tenants[:3] for what in ("rightsizing", "costs")]
    return lists + details + cursors + others + [f"/tenants/{uuid.UUID(int=999)}/", f"/requests/{uuid.UUID(int=9)}/"]


def _cursor(event: AuditEvent) -> str:
    return f"{(event.at - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(microseconds=1)}.{event.pk}"


def _callers(data: dict[str, Any]) -> dict[str, tuple[User, ApiToken | None]]:
    users = {u.username: u for u in User.objects.all()}
    named = {name: (users[name], None) for name in ("alice", "amir", "bob", "carol", "dave", "erin")}
    return {**named, "alice-team-token": (users["alice"], data["team_token"])}


def _answer(response: Any) -> tuple[int, str, str]:
    body = b"".join(response.streaming_content) if response.streaming else response.content
    return response.status_code, response.get("Content-Type"), body.decode()


def _read_all(api, data: dict[str, Any]) -> dict[str, tuple[int, str, str]]:
    tenants = list(Tenant.objects.order_by("name"))
    requests = list(TenantRequest.objects.order_by("id"))
    events = list(AuditEvent.objects.order_by("-at", "-id"))
    answers = {}
    for name, (user, token) in _callers(data).items():
        client = api()
        client.force_authenticate(user, token=token)
        for url in _urls(tenants, requests, events):
            answers[f"{name} GET {url}"] = _answer(client.get(API + url))
    return answers


@pytest.mark.django_db(transaction=True, reset_sequences=True)
def test_every_list_and_detail_answers_as_recorded(api, data_set):
    answers = _read_all(api, data_set)
    if os.environ.get("BERTH_RECORD_API_ANSWERS"):
        _record(answers)
    recorded = _recorded()
    assert sorted(answers) == sorted(recorded)
    differ = [key for key in recorded if answers[key] != recorded[key]]
    assert not differ, f"{len(differ)} answers changed, e.g. {differ[0]}:\n{answers[differ[0]]}\n{recorded[differ[0]]}"


# Many callers get the same answer: the file holds each body once, by its digest.
def _record(answers: dict[str, tuple[int, str, str]]) -> None:
    bodies = {hashlib.sha256(body.encode()).hexdigest()[:16]: body for _, _, body in answers.values()}
    by_key = {
        key: [status, kind, hashlib.sha256(body.encode()).hexdigest()[:16]]
        for key, (status, kind, body) in answers.items()
    }
    text = json.dumps({"answers": by_key, "bodies": bodies}, indent=1, ensure_ascii=False, sort_keys=True)
    ANSWERS.write_text(text + "\n")


def _recorded() -> dict[str, tuple[int, str, str]]:
    saved = json.loads(ANSWERS.read_text())
    return {key: (status, kind, saved["bodies"][digest]) for key, (status, kind, digest) in saved["answers"].items()}


SCHEMA = Path(__file__).with_name("openapi.yaml")


def test_the_openapi_schema_is_as_recorded():
    """The schema the API publishes, as ``manage.py spectacular`` writes it (recorded in ``openapi.yaml``)."""
    from drf_spectacular.generators import SchemaGenerator

    assert SchemaGenerator().get_schema(request=None, public=True) == yaml.safe_load(SCHEMA.read_text())
