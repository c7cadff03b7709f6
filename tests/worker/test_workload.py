"""Reading a container's log back: the byte bound, and following on from the last line shown."""

from __future__ import annotations

from typing import Any

import pytest

from worker.workload import parse_log, timestamp_key


def test_a_log_cut_at_the_byte_bound_drops_the_half_line_and_says_so():
    raw = b"2026-01-01T00:00:01.5Z first\n2026-01-01T00:00:02Z second\n2026-01-01T00:00:03Z thi"
    log = parse_log(raw, limit_bytes=len(raw))
    assert log.lines == ("first", "second") and log.truncated
    assert log.last_timestamp == "2026-01-01T00:00:02Z"
    whole = parse_log(raw[:-4] + b"\n", limit_bytes=1024)
    assert not whole.truncated and whole.lines == ("first", "second", "")


def test_following_on_skips_what_was_shown_whatever_the_number_of_fraction_digits():
    raw = (
        b"2026-01-01T00:00:05.1Z shown\n"
        b"2026-01-01T00:00:05.123456789Z shown too\n"
        b"2026-01-01T00:00:05.2Z new\n"
        b"2026-01-01T00:00:06Z newer\n"
    )
    log = parse_log(raw, limit_bytes=1024, after="2026-01-01T00:00:05.123456789Z")
    assert log.lines == ("new", "newer")
    assert timestamp_key("2026-01-01T00:00:05Z") < timestamp_key("2026-01-01T00:00:05.000000001Z")
    assert timestamp_key("2026-01-01T00:00:05.9Z") < timestamp_key("2026-01-01T00:00:06Z")


def test_bytes_that_are_not_utf8_are_replaced_not_fatal():
    log = parse_log(b"2026-01-01T00:00:01Z caf\xe9\n", limit_bytes=1024)
    assert log.lines == ("caf\ufffd",)


def test_a_line_without_a_timestamp_is_the_kubelets_own_and_kept_whole():
    log = parse_log(b"unable to retrieve container logs for containerd://abc\n", limit_bytes=1024)
    assert log.lines == ("unable to retrieve container logs for containerd://abc",)
    assert log.last_timestamp == ""


def test_berths_own_failure_to_mint_the_read_token_is_never_the_teams_refusal(monkeypatch):
    """A 403 on the TokenRequest is Berth's RBAC, not the API server refusing the team: 503, not 403 or 404."""
    from types import SimpleNamespace

    from tenants.errors import ClusterUnavailable
    from tenants.hooks import LogQuery
    from worker import hooks, kube, workload

    class Host:
        def with_timeout(self, seconds):
            return self

        def request_token(self, **kwargs):
            raise kube.KubePermanentError("serviceaccounts/token is forbidden", status=403)

    monkeypatch.setattr(kube, "for_cluster", lambda cluster: Host())
    tenant: Any = SimpleNamespace(cluster=None, namespace="t-shop")  # all a read looks at before the token
    with pytest.raises(ClusterUnavailable, match="could not issue the team's read token"):
        hooks.PortalHooks().read_workload(tenant, events=5)
    with pytest.raises(ClusterUnavailable):
        hooks.PortalHooks().read_pod_log(
            tenant, LogQuery(pod="web-1", container="", previous=False, tail_lines=10, limit_bytes=1024), role="view"
        )
    assert issubclass(workload.TokenNotIssued, kube.KubeError)
