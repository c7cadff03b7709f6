"""What Berth sends to a tenant's Prometheus, and what it refuses before sending (tenants/prometheus.py)."""

from __future__ import annotations

import pytest

from tenants import prometheus
from tenants.prometheus import QueryError, checked

NOW = 1_800_000_000.0
DAY = 86400


def params(**values: str | list[str]) -> dict[str, list[str]]:
    return {
        key.replace("match", "match[]"): value if isinstance(value, list) else [value] for key, value in values.items()
    }


def test_an_instant_query_goes_with_the_longest_timeout_berth_allows():
    assert checked("query", params(query="up"), now=NOW) == [("query", "up"), ("timeout", "15000ms")]
    assert checked("query", params(query="up", timeout="2m", time="1700000000"), now=NOW) == [
        ("query", "up"),
        ("time", "1700000000"),
        ("timeout", "15000ms"),
    ]
    assert checked("query", params(query="up", timeout="500ms"), now=NOW)[-1] == ("timeout", "500ms")


def test_only_prometheus_parameters_pass():
    # A caller's own namespace parameter, or the proxy's header smuggled as a parameter, never reaches the proxy.
    sent = checked("query", params(query="up", namespace="other", **{"X-Berth-Namespace": "other"}), now=NOW)
    assert [key for key, _ in sent] == ["query", "timeout"]


@pytest.mark.parametrize(
    ("endpoint", "values", "message"),
    [
        ("query", {}, "'query' is required"),
        ("query", {"query": "  "}, "is empty"),
        ("query", {"query": "x" * 5000}, "longer than 4096"),
        ("query", {"query": ["up", "down"]}, "given 2 times"),
        ("query", {"query": "up", "time": "yesterday"}, "not RFC 3339"),
        ("query", {"query": "up", "time": "2026-01-01T00:00:00"}, "no time zone"),
        ("query", {"query": "up", "time": "nan"}, "not a finite time"),
        ("query", {"query": "up", "timeout": "-1s"}, "not a duration"),
        ("query", {"query": "up", "timeout": "0"}, "positive duration"),
        ("query_range", {"query": "up", "start": "0", "end": str(9 * DAY), "step": "60"}, "longer than 8 days"),
        ("query_range", {"query": "up", "start": "100", "end": "0", "step": "60"}, "end is before start"),
        ("query_range", {"query": "up", "start": "0", "end": str(DAY), "step": "1"}, "more than 11000 points"),
        ("query_range", {"query": "up", "start": "0", "end": "60"}, "'step' is required"),
        ("query_range", {"query": "up", "start": "0", "end": "60", "step": "1e400"}, "positive duration"),
        ("series", {}, r"at least one 'match\[\]'"),
        ("series", {"match": ["up"] * 21}, "at most 20"),
        ("series", {"match": "up", "start": "0"}, "longer than 8 days"),
        ("labels", {"limit": "ten"}, "whole number"),
    ],
)
def test_requests_outside_the_bounds_are_refused_in_prometheus_words(endpoint, values, message):
    with pytest.raises(QueryError, match=message) as refused:
        checked(endpoint, params(**values), now=NOW)
    assert refused.value.status == 400
    assert refused.value.body() == {"status": "error", "errorType": "bad_data", "error": str(refused.value)}


def test_a_range_query_at_the_edge_of_the_bounds_goes():
    sent = checked("query_range", params(query="up", start="0", end=str(7 * DAY), step="1m"), now=NOW)
    assert sent == [
        ("query", "up"),
        ("start", "0.000"),
        ("end", f"{7 * DAY}.000"),
        ("step", "60.000"),
        ("timeout", "15000ms"),
    ]
    rfc3339 = params(query="up", start="2026-11-28T00:00:00Z", end="2026-11-28T01:00:00+00:00", step="1h30m")
    assert checked("query_range", rfc3339, now=NOW)[3] == ("step", "5400.000")


def test_series_and_labels_default_to_the_last_days_and_a_bounded_answer():
    assert checked("labels", {}, now=NOW) == [
        ("start", f"{NOW - 8 * DAY:.3f}"),
        ("end", f"{NOW:.3f}"),
        ("limit", "10000"),
    ]
    sent = checked("series", params(match=["up", "kube_pod_info"], limit="0"), now=NOW)
    assert sent[:2] == [("match[]", "up"), ("match[]", "kube_pod_info")]
    assert sent[-1] == ("limit", "10000")  # 0 would be "no limit" to Prometheus
    assert checked("label_values", params(limit="50"), now=NOW)[-1] == ("limit", "50")


def test_unknown_endpoints_are_not_forwarded():
    with pytest.raises(QueryError) as refused:
        checked("admin/tsdb/delete_series", {}, now=NOW)
    assert refused.value.status == 404


def test_label_names_are_prometheus_names():
    assert prometheus.LABEL_NAME.fullmatch("__name__")
    assert not prometheus.LABEL_NAME.fullmatch("../../admin")
    assert not prometheus.LABEL_NAME.fullmatch("9lives")


def test_nothing_before_the_tenant_existed_is_asked_for():
    """Its namespace's earlier series were another tenant's: starts move to the tenant's start, on the same grid."""
    since = NOW - 3600
    sent = dict(
        checked("query_range", params(query="up", start=str(NOW - DAY), end=str(NOW), step="600"), now=NOW, since=since)
    )
    assert float(sent["start"]) >= since and (float(sent["start"]) - (NOW - DAY)) % 600 == 0
    for endpoint, values in (
        ("query_range", {"query": "up", "start": str(NOW - DAY), "end": str(since - 1), "step": "60"}),
        ("query", {"query": "up", "time": str(since - 1)}),
        ("series", {"match": "up", "start": str(NOW - DAY), "end": str(since - 1)}),
    ):
        with pytest.raises(QueryError, match="before this tenant existed"):
            checked(endpoint, params(**values), now=NOW, since=since)
    assert dict(checked("labels", {}, now=NOW, since=since))["start"] == f"{since:.3f}"
