"""Locust users of bench/api_load.py: people of several teams reading and writing through the API.

Tags pick the scenario: ``tenants``, ``requests``, ``audit`` (one of Berth's lists alone), ``stock-tenants``,
``stock-requests``, ``stock-audit`` (the same page from a stock DRF endpoint: bench/api_urls.py), ``mix`` (reads and
writes together). The tenants and requests lists are read at their first page;
the audit trail, paged by cursor, is read as a reader walks it: its first page, then its ``next`` links,
AUDIT_DEPTH pages deep, then from the top again. BERTH_BENCH_USERS names a JSON file of
``{"username", "team", "token"}``; what the writes got back is written to BERTH_BENCH_RESULTS at the end.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections import Counter
from urllib.parse import quote, urlsplit

from locust import FastHttpUser, constant, events, tag, task

PEOPLE = json.loads(open(os.environ["BERTH_BENCH_USERS"]).read())
SINCE = quote(os.environ.get("BERTH_BENCH_SINCE", ""))  # "+00:00" would arrive as " 00:00"
RUN = os.environ.get("BERTH_BENCH_RUN", "run")
AUDIT_DEPTH = 10
_NEXT = re.compile(rb'\{"next":(?:null|"([^"\\]*)")')
_next_person = itertools.cycle(PEOPLE)
_names = itertools.count()
created: list[str] = []
cancelled: list[str] = []
statuses: Counter[str] = Counter()
audit_pages: Counter[str] = Counter()  # "first" pages and pages read by a "cursor"


@events.request.add_listener
def _count(response=None, exception=None, **kwargs) -> None:
    statuses[str(response.status_code) if response is not None else "no answer"] += 1


@events.test_stop.add_listener
def _write_results(**kwargs) -> None:
    with open(os.environ["BERTH_BENCH_RESULTS"], "w") as out:
        json.dump({"created": created, "cancelled": cancelled, "statuses": statuses, "audit_pages": audit_pages}, out)


class TeamMember(FastHttpUser):
    wait_time = constant(0)

    def on_start(self) -> None:
        person = next(_next_person)
        self.username, self.team = person["username"], person["team"]
        self.auth = {"Authorization": f"Token {person['token']}"}
        self.pending: list[str] = []
        self.audit_next: str | None = None
        self.audit_depth = 0

    def get(self, path: str, name: str) -> None:
        self.client.get(path, headers=self.auth, name=name)

    @tag("tenants", "mix")
    @task(4)
    def tenants(self) -> None:
        self.get(f"/api/v1/tenants/?team={self.team}&limit=50", "GET tenants")

    @tag("stock-tenants")
    @task
    def stock_tenants(self) -> None:
        self.get(f"/bench/stock/tenants/?team={self.team}&limit=50", "stock GET tenants")

    @tag("requests", "mix")
    @task(3)
    def requests(self) -> None:
        self.get(f"/api/v1/requests/?team={self.team}&limit=50", "GET requests")

    @tag("stock-requests")
    @task
    def stock_requests(self) -> None:
        self.get(f"/bench/stock/requests/?team={self.team}&limit=50", "stock GET requests")

    @tag("audit", "mix")
    @task(3)
    def audit(self) -> None:
        self.walk_audit("/api/v1/audit-events/", "GET audit-events")

    @tag("stock-audit")
    @task
    def stock_audit(self) -> None:
        self.walk_audit("/bench/stock/audit-events/", "stock GET audit-events")

    def walk_audit(self, list_path: str, name: str) -> None:
        path = self.audit_next or f"{list_path}?team={self.team}&limit=50"
        response = self.client.get(path, headers=self.auth, name=name)
        audit_pages["cursor" if self.audit_next else "first"] += 1
        self.audit_depth = 1 if self.audit_next is None else self.audit_depth + 1
        self.audit_next = None
        if response.status_code == 200 and self.audit_depth < AUDIT_DEPTH:
            # ``next`` is the answer's first key: read it alone, as the other phases parse nothing (the client
            # shares the machine's two cores with the portal, so its work would count against the list).
            found = _NEXT.match(response.content or b"")
            link = urlsplit(found[1].decode() if found and found[1] else "")
            self.audit_next = f"{link.path}?{link.query}" if link.path else None

    @tag("mix")
    @task(1)
    def export(self) -> None:
        self.get(f"/api/v1/audit-events/export/?team={self.team}&since={SINCE}", "GET audit-events/export")

    @tag("mix")
    @task(2)
    def me(self) -> None:
        self.get("/api/v1/me/", "GET me")

    @tag("mix")
    @task(1)
    def submit(self) -> None:
        name = f"ld-{RUN}-{next(_names)}"
        body = {"team": self.team, "name": name, "tier": "medium", "cluster": "bench", "purpose": "load"}
        headers = {**self.auth, "Idempotency-Key": name}
        with self.client.post("/api/v1/requests/", json=body, headers=headers, name="POST requests") as response:
            if response.status_code == 201:
                request_id = response.json()["id"]
                created.append(request_id)
                self.pending.append(request_id)

    @tag("mix")
    @task(1)
    def cancel(self) -> None:
        if not self.pending:
            return
        request_id = self.pending.pop()
        path = f"/api/v1/requests/{request_id}/cancel/"
        with self.client.post(path, headers=self.auth, name="POST requests/{id}/cancel") as response:
            if response.status_code == 200:
                cancelled.append(request_id)
