"""A tenant's pods, events and pod logs on its page, read with the team's own identity (tenants.services.workload).

Live follow is polling, not a stream: every few seconds the page asks for the lines after the last one it has
(``sinceTime``), each ask a short bounded request. A gunicorn sync worker is never held by a follower, and a
follow ends by itself after FOLLOW_POLLS asks. Log lines are put into the answer and never logged.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from tenants import services
from tenants.api.throttling import page_wait
from tenants.audit import AuditContext
from tenants.errors import Busy, ClusterRefused, ClusterUnavailable, Forbidden, InvalidTransition
from tenants.models import Tenant
from tenants.views.common import AuthedRequest, visible_tenant

THROTTLE_SCOPE = "workload"
FOLLOW_SECONDS = 3
FOLLOW_POLLS = 200  # ten minutes at FOLLOW_SECONDS
TAIL_CHOICES = (50, 200, 500)


def _too_many(request: AuthedRequest) -> str:
    wait = page_wait(request, THROTTLE_SCOPE)
    return f"Too many reads of events and logs; try again in {int(wait) + 1} s." if wait is not None else ""


def workload_context(request: AuthedRequest, tenant: Tenant) -> dict:
    """The Events tab: the pods (each with a logs link) and the newest events, or why they cannot be shown."""
    unavailable = services.workload_unavailable(tenant=tenant) or _too_many(request)
    if unavailable:
        return {"workload_error": unavailable}
    try:
        workload = services.tenant_read_workload(tenant=tenant, actor=request.user)
    except (Forbidden, InvalidTransition, ClusterUnavailable, ClusterRefused, Busy) as exc:
        return {"workload_error": str(exc)}
    return {"workload": workload, "events_max": services.EVENTS_SHOWN}


def _log_params(request: AuthedRequest) -> dict:
    try:
        tail = int(request.GET.get("tail") or services.LOG_LINES_DEFAULT)
    except ValueError:
        tail = 0  # refused by the service with the bounds
    return {
        "container": request.GET.get("container", ""),
        "previous": request.GET.get("previous") == "1",
        "tail_lines": tail,
    }


def _read_log(request: AuthedRequest, tenant: Tenant, pod: str, *, since_time: str = "") -> tuple[dict, int]:
    """(context, status) of one bounded read; refusals are shown, never raised."""
    params = _log_params(request)
    too_many = _too_many(request)
    if too_many:
        return {"log_error": too_many}, 429
    try:
        log = services.tenant_read_pod_log(
            tenant=tenant,
            actor=request.user,
            pod=pod,
            since_time=since_time,
            ctx=AuditContext.from_http(request),
            **params,
        )
    except Forbidden as exc:
        return {"log_error": str(exc)}, 403
    except Busy as exc:
        return {"log_error": str(exc)}, 429
    except ValidationError as exc:
        return {"log_error": " ".join(exc.messages)}, 400
    except ClusterRefused as exc:
        return {"log_error": f"The cluster refused: {exc}"}, 404 if exc.status == 404 else 403
    except (InvalidTransition, ClusterUnavailable) as exc:
        return {"log_error": str(exc)}, 503
    return {"log": log}, 200


@never_cache
@login_required
@require_GET
def tenant_pod_log(request: AuthedRequest, pk, pod: str) -> HttpResponse:
    """A pod's log: the last lines of one container (or of its previous run, for a crash loop), optionally
    followed live."""
    tenant = visible_tenant(request, pk)
    context, status = _read_log(request, tenant, pod)
    params = _log_params(request)
    context |= {
        "tenant": tenant,
        "pod": pod,
        "params": params,
        "tail_choices": TAIL_CHOICES,
        "follow": request.GET.get("follow") == "1" and "log" in context and not params["previous"],
        "follow_seconds": FOLLOW_SECONDS,
        "polls": 0,
        "lines_max": services.LOG_LINES_MAX,
        "bytes_max_kib": services.LOG_BYTES_MAX // 1024,
    }
    return render(request, "pages/tenant_pod_log.html", context, status=status)


@never_cache
@login_required
@require_GET
def tenant_pod_log_follow(request: AuthedRequest, pk, pod: str) -> HttpResponse:
    """The lines after ``since`` and the next poll (none once FOLLOW_POLLS asks were made or a read failed)."""
    tenant = visible_tenant(request, pk)
    since = request.GET.get("since", "")
    try:
        polls = int(request.GET.get("polls") or 0) + 1
    except ValueError:
        polls = FOLLOW_POLLS
    if not 1 <= polls <= FOLLOW_POLLS:  # a count the page never sends (negative, too large): stop following
        polls = FOLLOW_POLLS
    context, _ = _read_log(request, tenant, pod, since_time=since)
    log = context.get("log")
    context |= {
        "tenant": tenant,
        "pod": pod,
        "params": _log_params(request),
        "since": (log.last_timestamp if log and log.last_timestamp else since),
        "polls": polls,
        "follow": log is not None and polls < FOLLOW_POLLS,
        "follow_seconds": FOLLOW_SECONDS,
        "follow_minutes": FOLLOW_POLLS * FOLLOW_SECONDS // 60,
    }
    # Always 200: htmx swaps only successful answers, and a refusal is shown in place (and ends the follow).
    return render(request, "fragments/pod_log_follow.html", context)
