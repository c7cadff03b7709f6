"""Right-sizing: is this tenant's tier the right size for what it used? A pure rule over its usage history.

Read by ``tenants.services.rightsizing`` (which loads the history and files the tier change) and unit-tested
with known histories. The rule, in full (docs/rightsizing.md says the same for people):

- The window is the last ``days`` complete UTC days, and only days the tenant spent on its current tier
  (``TenantUsageDay.tier``): a tier change starts the count again. Time asleep is left out of averages.
- **Near its limits → the next tier up.** A resource is near its limit on a day when the day's peak reached
  ``near_share`` of the quota; when one is on ``near_days`` days or more, the suggestion is the smallest
  tier offered that is at least as large in every quota and larger in each resource near its limit.
- **Under-used → a smaller tier.** When the readings cover at least ``min_coverage`` of the window and every
  compute and storage resource (CPU, memory, storage) averaged under ``under_share`` of its quota, the
  suggestion is the smallest tier offered, no larger than the current one in any quota, that holds every
  resource's peak times ``headroom``.
- **Measured evidence.** When the cluster's Prometheus measured the tenant's containers (``measured.cpu``,
  ``measured.memory`` in the history) over at least ``min_coverage`` of the window, CPU and memory are judged
  on what they used instead of what their pods requested: the under-used test reads measured CPU and memory
  against the requests quota (storage stays on requests), and a smaller tier must hold the measured peaks times
  ``headroom`` in its CPU and memory quotas. Such a target whose quotas are below what the pods requested on the
  window's last day still is the suggestion (it is the size the tenant needs), but its reason says the requests
  must come down first: the quota would refuse new pods. Otherwise (no Prometheus, or too little measured) the
  rule is the requests-only rule above. Either way a measured memory peak at ``near_share`` of the
  ``limits.memory`` quota counts as near its limit (the containers are near being OOM-killed), and the
  assessment says which evidence it used (``basis``).
- Otherwise no suggestion. A suggestion carries a fingerprint of everything it was computed from (tenant,
  tier, window, history, basis): accepting a suggestion whose fingerprint no longer matches is refused.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from django.conf import settings

from tenants.models import Tier

DAY_SECONDS = 86400.0
_MIB = float(2**20)
_GIB = float(2**30)

# Each quota resource Berth sets (worker/manifests.py resource_quotas) and the tier field it comes from, in base
# units (cores, bytes, counts): what "this tier holds that peak" is measured with.
TIER_QUOTA: dict[str, Callable[[Tier], float]] = {
    "requests.cpu": lambda t: t.cpu_request_millis / 1000,
    "limits.cpu": lambda t: t.cpu_limit_millis / 1000,
    "requests.memory": lambda t: t.memory_request_mib * _MIB,
    "limits.memory": lambda t: t.memory_limit_mib * _MIB,
    "requests.storage": lambda t: t.storage_gib * _GIB,
    "persistentvolumeclaims": lambda t: float(t.max_pvcs),
    "pods": lambda t: float(t.max_pods),
    "services": lambda t: float(t.max_services),
    "services.loadbalancers": lambda t: float(t.max_load_balancers),
    "configmaps": lambda t: float(t.max_configmaps),
    "secrets": lambda t: float(t.max_secrets),
    "count/deployments.apps": lambda t: float(t.max_pods),
    "count/jobs.batch": lambda t: float(t.max_pods),
}
# What "uses under a share of its tier" is about: compute and storage (object counts are cheap).
DRIVERS = ("requests.cpu", "limits.cpu", "requests.memory", "limits.memory", "requests.storage")
# The same with measured evidence: what the containers used of the requests quota, and storage as requested.
MEASURED_DRIVERS = ("measured.cpu", "measured.memory", "requests.storage")
# Each measured resource, and the quotas its peak must fit under in a smaller tier.
MEASURED_FITS = {
    "measured.cpu": ("requests.cpu", "limits.cpu"),
    "measured.memory": ("requests.memory", "limits.memory"),
}
# The quota a measured resource's near-limit days are about (a larger tier is larger in it).
MEASURED_NEAR = {"measured.memory": "limits.memory"}
LABELS = {
    "requests.cpu": "CPU requested",
    "limits.cpu": "CPU limit",
    "requests.memory": "memory requested",
    "limits.memory": "memory limit",
    "requests.storage": "storage",
    "persistentvolumeclaims": "volume claims",
    "pods": "pods",
    "services": "services",
    "services.loadbalancers": "load balancers",
    "configmaps": "ConfigMaps",
    "secrets": "Secrets",
    "count/deployments.apps": "Deployments",
    "count/jobs.batch": "Jobs",
    "measured.cpu": "CPU used (measured)",
    "measured.memory": "memory used (measured)",
}

Direction = Literal["down", "up"]
Basis = Literal["measured", "requests"]
BASIS_LABELS: dict[str, str] = {"measured": "measured (Prometheus)", "requests": "quota requests"}
BASIS_CHOICES = [("measured", "Measured (Prometheus)"), ("requests", "Quota requests")]
Found = tuple[Tier | None, str, tuple[str, ...]]  # target tier, reason, notes on why there is none


@dataclass(frozen=True)
class Policy:
    """The rule's knobs (BERTH_RIGHTSIZE_* settings)."""

    days: int = 14
    under_share: float = 0.3
    min_coverage: float = 0.8
    near_share: float = 0.9
    near_days: int = 2
    headroom: float = 1.25

    @classmethod
    def from_settings(cls) -> Policy:
        return cls(
            days=settings.BERTH_RIGHTSIZE_DAYS,
            under_share=settings.BERTH_RIGHTSIZE_UNDER_SHARE,
            min_coverage=settings.BERTH_RIGHTSIZE_MIN_COVERAGE,
            near_share=settings.BERTH_RIGHTSIZE_NEAR_SHARE,
            near_days=settings.BERTH_RIGHTSIZE_NEAR_DAYS,
            headroom=settings.BERTH_RIGHTSIZE_HEADROOM,
        )

    def window(self, today: dt.date) -> tuple[dt.date, dt.date]:
        """The first and last day the rule reads: the ``days`` complete UTC days before ``today``."""
        return today - dt.timedelta(days=self.days), today - dt.timedelta(days=1)


@dataclass(frozen=True)
class Day:
    """One ``TenantUsageDay`` as the rule reads it, with the seconds the tenant slept that day."""

    day: dt.date
    seconds: float
    samples: int
    usage: Mapping[str, Mapping[str, float]]
    asleep_seconds: float = 0.0


@dataclass(frozen=True)
class Evidence:
    """One resource over the window: time-weighted average (awake time) and peak, against the current quota."""

    resource: str
    label: str
    average: float
    peak: float
    quota: float
    average_share: float | None  # None when the quota is 0: nothing to measure against
    peak_share: float | None
    near_limit_days: int
    limit: float | None = None  # measured memory: the limits.memory quota its near-limit days are counted against


@dataclass(frozen=True)
class Assessment:
    """What the rule found: the evidence always, a suggestion (direction, target tier, reason) when there is one."""

    window_start: dt.date
    window_end: dt.date
    days: int
    covered_seconds: float
    coverage: float
    evidence: tuple[Evidence, ...]
    direction: Direction | None = None
    target: Tier | None = None
    reason: str = ""
    fingerprint: str = ""
    notes: tuple[str, ...] = field(default=())
    basis: Basis = "requests"  # what CPU and memory were judged on
    measured_seconds: float = 0.0  # of the window, how much measured readings cover
    measured_coverage: float = 0.0

    @property
    def basis_label(self) -> str:
        return BASIS_LABELS[self.basis]


def tier_quota(tier: Tier) -> dict[str, float]:
    return {resource: of(tier) for resource, of in TIER_QUOTA.items()}


def _at_most(a: Tier, b: Tier) -> bool:
    qa, qb = tier_quota(a), tier_quota(b)
    return all(qa[r] <= qb[r] for r in TIER_QUOTA)


def is_smaller(candidate: Tier, current: Tier) -> bool:
    """Every quota of ``candidate`` at most ``current``'s, and one below it."""
    return _at_most(candidate, current) and tier_quota(candidate) != tier_quota(current)


_POD_SECURITY_STRICTNESS = {"privileged": 0, "baseline": 1, "restricted": 2}
_NETWORK_OPENNESS = {"isolated": 0, "ingress": 1, "open-egress": 2}
_ESCAPES = ("allow_external_ips", "allow_external_name", "allow_manual_endpoints", "allow_any_ingress_host")


def grants_nothing_more(candidate: Tier, current: Tier) -> bool:
    """Moving from ``current`` to ``candidate`` opens nothing: no looser Pod Security or network profile, no escape
    class, priority class, storage class, toleration or node pool, no longer credential, that ``current`` lacks.
    """
    if _POD_SECURITY_STRICTNESS[candidate.pod_security_level] < _POD_SECURITY_STRICTNESS[current.pod_security_level]:
        return False
    if _NETWORK_OPENNESS[candidate.network_profile] > _NETWORK_OPENNESS[current.network_profile]:
        return False
    if any(getattr(candidate, flag) and not getattr(current, flag) for flag in _ESCAPES):
        return False
    if not set(candidate.allowed_priority_classes or []) <= set(current.allowed_priority_classes or []):
        return False
    if current.allowed_storage_classes and not (
        candidate.allowed_storage_classes
        and set(candidate.allowed_storage_classes) <= set(current.allowed_storage_classes)
    ):
        return False  # an empty list allows any storage class
    as_text = [json.dumps(t, sort_keys=True) for t in current.tolerations or []]
    if any(json.dumps(t, sort_keys=True) not in as_text for t in candidate.tolerations or []):
        return False
    if candidate.node_selector and candidate.node_selector != current.node_selector:
        return False  # the shared pool (no selector) or the same one
    return candidate.max_credential_lifetime_seconds <= current.max_credential_lifetime_seconds


def is_downgrade(candidate: Tier, current: Tier) -> bool:
    """A smaller tier that grants nothing more: what ``Tier.auto_approve_downgrades`` lets through unseen."""
    return is_smaller(candidate, current) and grants_nothing_more(candidate, current)


def _size(tier: Tier) -> tuple:
    return (tier.cpu_limit_millis, tier.memory_limit_mib, tier.storage_gib, tier.order, tier.name)


def _share(value: float, quota: float) -> float | None:
    return value / quota if quota > 0 else None


def _percent(share: float | None) -> str:
    return "—" if share is None else f"{share:.0%}"


def _awake(day: Day, covered: float) -> float:
    """Of ``covered`` seconds of the day, how many the tenant was awake (asleep time spread evenly over the
    day's readings, as the readings cannot say which of them fell in it)."""
    if day.seconds <= 0:
        return 0.0
    return covered * max(day.seconds - day.asleep_seconds, 0.0) / day.seconds


def _near_quota(resource: str, entry: Mapping[str, float]) -> float:
    """What a day's peak of ``resource`` is near the limit of: its quota, for measured memory the limits quota."""
    if resource in MEASURED_NEAR:
        return float(entry.get("limit", 0.0))
    if resource in MEASURED_FITS:
        return 0.0  # CPU used near a quota is throttled, not refused: not a limit reached
    return float(entry["hard"])


def _evidence(days: Sequence[Day], policy: Policy) -> tuple[Evidence, ...]:
    used: dict[str, float] = {}
    peak: dict[str, float] = {}
    near: dict[str, int] = {}
    quota: dict[str, float] = {}
    limit: dict[str, float] = {}
    awake_of: dict[str, float] = {}
    awake = sum(max(d.seconds - d.asleep_seconds, 0.0) for d in days)
    for d in sorted(days, key=lambda d: d.day):
        for resource, entry in d.usage.items():
            hard = float(entry["hard"])
            used[resource] = used.get(resource, 0.0) + float(entry["used_seconds"])
            peak[resource] = max(peak.get(resource, 0.0), float(entry["max"]))
            quota[resource] = hard  # the latest day's quota
            if "seconds" in entry:  # measured: its own coverage
                awake_of[resource] = awake_of.get(resource, 0.0) + _awake(d, float(entry["seconds"]))
            if resource in MEASURED_NEAR:
                limit[resource] = float(entry.get("limit", 0.0))
            near_quota = _near_quota(resource, entry)
            if near_quota > 0 and float(entry["max"]) >= policy.near_share * near_quota:
                near[resource] = near.get(resource, 0) + 1
    order = {resource: i for i, resource in enumerate([*TIER_QUOTA, *MEASURED_FITS])}
    rows = []
    for resource in sorted(used, key=lambda r: (order.get(r, len(order)), r)):
        over = awake_of.get(resource, awake)
        average = used[resource] / over if over > 0 else 0.0
        rows.append(
            Evidence(
                resource=resource,
                label=LABELS.get(resource, resource),
                average=average,
                peak=peak[resource],
                quota=quota[resource],
                average_share=_share(average, quota[resource]),
                peak_share=_share(peak[resource], quota[resource]),
                near_limit_days=near.get(resource, 0),
                limit=limit.get(resource),
            )
        )
    return tuple(rows)


def _measured_seconds(days: Sequence[Day]) -> float:
    """How much of ``days`` measured readings cover (CPU and memory both)."""
    return sum(
        min(float((d.usage.get(resource) or {}).get("seconds", 0.0)) for resource in MEASURED_FITS) for d in days
    )


def _fingerprint(
    subject: str, current: Tier, target: Tier, direction: str, days: Sequence[Day], window, basis: Basis
) -> str:
    """Everything a suggestion was computed from; a different history or tier makes a different fingerprint."""
    payload: dict[str, object] = {
        "subject": subject,
        "tier": [current.pk, current.name, tier_quota(current)],
        "target": [target.pk, target.name, tier_quota(target)],
        "direction": direction,
        "window": [window[0].isoformat(), window[1].isoformat()],
        "days": [
            [
                d.day.isoformat(),
                d.seconds,
                d.samples,
                d.asleep_seconds,
                {k: dict(v) for k, v in sorted(d.usage.items())},
            ]
            for d in sorted(days, key=lambda d: d.day)
        ],
    }
    if basis != "requests":  # requests-only suggestions keep the fingerprints they had before measured usage
        payload["basis"] = basis
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _quota_of(resource: str) -> str:
    """The tier quota a resource's near-limit days are about."""
    return MEASURED_NEAR.get(resource, resource)


def _near_percent(e: Evidence) -> str:
    if e.resource in MEASURED_NEAR:
        return f"{_percent(_share(e.peak, e.limit or 0.0))} of its {_quota_of(e.resource)} quota"
    return f"{_percent(e.peak_share)} of its quota"


def _upsize(evidence: Sequence[Evidence], current: Tier, offered: Sequence[Tier], policy: Policy) -> Found:
    near = [e for e in evidence if e.near_limit_days >= policy.near_days and _quota_of(e.resource) in TIER_QUOTA]
    if not near:
        return None, "", ()
    now = tier_quota(current)
    larger = [
        t
        for t in offered
        if t.name != current.name
        and _at_most(current, t)
        and all(tier_quota(t)[_quota_of(e.resource)] > now[_quota_of(e.resource)] for e in near)
    ]
    phrases = "; ".join(
        f"{e.label} peaked at {_near_percent(e)} (on {e.near_limit_days} day{'s' if e.near_limit_days != 1 else ''})"
        for e in near
    )
    if not larger:
        return None, "", (f"Near its limits ({phrases}), but no larger tier is offered on this cluster.",)
    target = min(larger, key=_size)
    reason = (
        f"Ran near its limits over the last {policy.days} days: {phrases}. {target.display_name} is the next tier up."
    )
    return target, reason, ()


def _peaks(evidence: Sequence[Evidence], basis: Basis) -> dict[str, float]:
    """The peak a smaller tier must hold in each quota: as recorded, but CPU and memory as measured when the
    basis is measured (what the containers used, not what their pods asked for)."""
    peaks = {e.resource: e.peak for e in evidence if e.resource in TIER_QUOTA}
    if basis == "measured":
        for e in evidence:
            for resource in MEASURED_FITS.get(e.resource, ()):
                peaks[resource] = e.peak
    return peaks


def _requested_now(days: Sequence[Day]) -> dict[str, float]:
    """What the pods requested of each CPU and memory quota on the window's last day with readings (its peak)."""
    latest = max(days, key=lambda d: d.day)
    quotas = {quota for fits in MEASURED_FITS.values() for quota in fits}
    return {r: float(e["max"]) for r, e in latest.usage.items() if r in quotas}


def _over_requests(requested: Mapping[str, float], target: Tier) -> str:
    """Which of ``target``'s CPU and memory quotas the pods' current requests exceed, in words ('' if none)."""
    quota = tier_quota(target)
    over = [r for r in sorted(requested, key=list(TIER_QUOTA).index) if requested[r] > quota[r]]
    return "; ".join(
        f"{LABELS[r]} {_amount(r, requested[r])}, {target.display_name} allows {_amount(r, quota[r])}" for r in over
    )


def _amount(resource: str, value: float) -> str:
    if resource.endswith(".cpu"):
        return f"{value:g} core{'s' if value != 1 else ''}"
    return f"{value / _MIB:,.0f} MiB"


def _downsize(
    evidence: Sequence[Evidence],
    coverage: float,
    current: Tier,
    offered: Sequence[Tier],
    policy: Policy,
    *,
    basis: Basis = "requests",
    measured_coverage: float = 0.0,
    requested: Mapping[str, float] | None = None,
) -> Found:
    if coverage < policy.min_coverage:
        return None, "", (f"Too little history: readings cover {coverage:.0%} of the last {policy.days} days.",)
    judged = MEASURED_DRIVERS if basis == "measured" else DRIVERS
    drivers = [e for e in evidence if e.resource in judged and e.average_share is not None]
    if not drivers or any(e.average_share is not None and e.average_share >= policy.under_share for e in drivers):
        return None, "", ()
    peaks = _peaks(evidence, basis)
    fitting = [
        t
        for t in offered
        if t.name != current.name
        and is_smaller(t, current)
        and all(peak * policy.headroom <= tier_quota(t)[resource] for resource, peak in peaks.items())
    ]
    phrases = "; ".join(
        f"{e.label} {_percent(e.average_share)} on average, peak {_percent(e.peak_share)}" for e in drivers
    )
    if not fitting:
        return None, "", (f"Under-used ({phrases}), but no smaller tier offered here holds its peaks.",)
    target = min(fitting, key=_size)
    if basis == "measured":
        reason = (
            f"Its containers used under {policy.under_share:.0%} of what {current.display_name} reserves over the "
            f"last {policy.days} days, as its cluster's Prometheus measured them ({measured_coverage:.0%} measured): "
            f"{phrases}. {target.display_name} holds every measured peak with {policy.headroom - 1:.0%} headroom."
        )
        over = _over_requests(requested or {}, target)
        if over:
            reason += (
                f" But its pods request more than {target.display_name}'s quota ({over}): lower their requests "
                "and limits first, or the quota will refuse new pods after the move."
            )
        return target, reason, ()
    reason = (
        f"Used under {policy.under_share:.0%} of {current.display_name} over the last {policy.days} days "
        f"({coverage:.0%} covered): {phrases}. {target.display_name} holds every peak with "
        f"{policy.headroom - 1:.0%} headroom."
    )
    return target, reason, ()


def assess(
    *,
    subject: str,
    days: Sequence[Day],
    current: Tier,
    offered: Sequence[Tier],
    policy: Policy,
    today: dt.date,
) -> Assessment:
    """Right-size a tenant (``subject``: its id) on ``current`` from ``days`` (its history on that tier; days
    outside the window are ignored), choosing among the active tiers ``offered`` on its cluster.
    """
    start, end = policy.window(today)
    days = [d for d in days if start <= d.day <= end]
    covered = sum(d.seconds for d in days)
    coverage = min(covered / (policy.days * DAY_SECONDS), 1.0) if policy.days > 0 else 0.0
    evidence = _evidence(days, policy)
    offered = [t for t in offered if t.is_active]
    measured = _measured_seconds(days)
    measured_coverage = min(measured / (policy.days * DAY_SECONDS), 1.0) if policy.days > 0 else 0.0
    basis: Basis = "measured" if days and measured_coverage >= policy.min_coverage else "requests"
    base = Assessment(
        window_start=start,
        window_end=end,
        days=policy.days,
        covered_seconds=covered,
        coverage=coverage,
        evidence=evidence,
        basis=basis,
        measured_seconds=measured,
        measured_coverage=measured_coverage,
    )
    if not days:
        return replace(base, notes=(f"No usage recorded on this tier in the last {policy.days} days.",))
    direction: Direction = "up"
    target, reason, notes = _upsize(evidence, current, offered, policy)
    if target is None and not notes:
        direction = "down"
        target, reason, notes = _downsize(
            evidence,
            coverage,
            current,
            offered,
            policy,
            basis=basis,
            measured_coverage=measured_coverage,
            requested=_requested_now(days),
        )
    if target is None:
        return replace(base, notes=notes)
    return replace(
        base,
        direction=direction,
        target=target,
        reason=reason,
        fingerprint=_fingerprint(subject, current, target, direction, days, (start, end), basis),
    )


__all__ = [
    "BASIS_CHOICES",
    "BASIS_LABELS",
    "DRIVERS",
    "MEASURED_DRIVERS",
    "TIER_QUOTA",
    "Assessment",
    "Basis",
    "Day",
    "Evidence",
    "Policy",
    "assess",
    "grants_nothing_more",
    "is_downgrade",
    "is_smaller",
    "tier_quota",
]
