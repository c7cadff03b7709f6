"""Sleep and wake on the cluster: a namespace's Deployments and StatefulSets scaled to zero, CronJobs suspended,
each object remembering what it was in an annotation on itself; waking puts back exactly that.

- Sleeping records ``berth.dev/slept-replicas`` (the replica count) on each Deployment and StatefulSet and
  ``berth.dev/slept-suspend`` (``true``/``false``) on each CronJob, then sets replicas 0 / suspend true, in one
  merge patch guarded by the object's resourceVersion (a concurrent edit makes the patch fail, and the next pass
  looks again). A pass over a sleeping namespace is idempotent: an object created while asleep is recorded and
  scaled down; one the tenant scaled up (or un-suspended) while asleep is put back to zero, keeping the count it
  had when the tenant fell asleep.
- Waking restores each annotated object and removes the annotation: replicas from the annotation, bounded by
  ``0..max_replicas`` (the tier's pod count: no Deployment can run more pods than the quota allows anyway), and
  an unreadable value leaves the object at zero; a CronJob that was suspended before sleep stays suspended. An
  object someone scaled up (or un-suspended) since keeps what they set.

The annotations live on objects the tenant can edit with its own credentials. That is fine: the restore only
ever patches objects it listed in the tenant's own namespace (the path names the namespace; nothing from the
annotation is used but a number or a boolean), and the number is clamped and, beyond that, bounded by the
namespace's ResourceQuota like any replica count the tenant could set itself (tests/security/test_sleep.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from worker.kube import Kube, KubePermanentError, Manifest

REPLICAS_ANNOTATION = "berth.dev/slept-replicas"
SUSPEND_ANNOTATION = "berth.dev/slept-suspend"
SCALED_KINDS = ("Deployment", "StatefulSet")
CHANGED_UNDER = "changed while Berth worked, retried next pass: "
LEFT_AT_ZERO = "left at zero, unreadable " + REPLICAS_ANNOTATION + ": "
NOTED = 10  # names per part of a note


@dataclass
class SleepResult:
    """What one pass changed, and what it could not (objects changed under it: the next pass looks again)."""

    changed: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # what the next pass waits for (a control plane starting)

    def note(self) -> str:
        parts = []
        if self.conflicts:
            parts.append(CHANGED_UNDER + ", ".join(self.conflicts[:NOTED]))
        if self.unreadable:
            parts.append(LEFT_AT_ZERO + ", ".join(self.unreadable[:NOTED]))
        if self.waiting:
            parts.append("waiting for " + ", ".join(self.waiting))
        return "; ".join(parts)

    def add(self, other: SleepResult) -> None:
        """Merge another pass's outcome into this one (one namespace of several)."""
        self.changed += other.changed
        self.conflicts += other.conflicts
        self.unreadable += other.unreadable
        self.waiting += other.waiting

    def carry(self, earlier_note: str) -> None:
        """Keep what an earlier pass of the same wake left at zero, as its ``note()`` said.

        A wake that meets a conflict takes more than one pass, and a pass removes the annotation of every object it
        restores or leaves at zero, so the pass that completes the wake no longer sees what an earlier one found
        unreadable. The wake's note is the only record of it (``tenant_wake`` clears the note when a wake begins).
        Object names are DNS labels, so ``", "`` and ``"; "`` cannot occur inside one.
        """
        for part in earlier_note.split("; "):
            if part.startswith(LEFT_AT_ZERO):
                earlier = [name for name in part.removeprefix(LEFT_AT_ZERO).split(", ") if name]
                self.unreadable = earlier + [name for name in self.unreadable if name not in earlier]


def _name(obj: Manifest) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def _annotations(obj: Manifest) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


def _replicas(obj: Manifest) -> int:
    value = (obj.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)  # the API server's default


def _suspended(obj: Manifest) -> bool:
    return bool((obj.get("spec") or {}).get("suspend"))


def _patch(obj: Manifest, annotations: dict[str, Any], spec: dict[str, Any]) -> Manifest:
    meta: dict[str, Any] = {"resourceVersion": obj["metadata"]["resourceVersion"]}
    if annotations:
        meta["annotations"] = annotations
    return {"kind": obj["kind"], "name": obj["metadata"]["name"], "body": {"metadata": meta, "spec": spec}}


def _send(k: Kube, namespace: str, patch: Manifest, result: SleepResult) -> bool:
    """One guarded patch in ``namespace`` (the tenant's: the path names it); False on a conflict, which is left to
    the next pass."""
    name = f"{patch['kind']}/{patch['name']}"
    try:
        k.patch(patch["kind"], patch["name"], patch["body"], namespace=namespace)
    except KubePermanentError as exc:
        if exc.status in (404, 409):  # deleted or changed since it was listed
            result.conflicts.append(name)
            return False
        raise
    result.changed.append(name)
    return True


def _workloads(k: Kube, namespace: str) -> list[Manifest]:
    return [obj for kind in (*SCALED_KINDS, "CronJob") for obj in k.list(kind, namespace=namespace)]


def sleep_namespace(k: Kube, namespace: str) -> SleepResult:
    """Scale ``namespace``'s Deployments and StatefulSets to zero and suspend its CronJobs (idempotent)."""
    result = SleepResult()
    for obj in _workloads(k, namespace):
        notes = _annotations(obj)
        if obj["kind"] == "CronJob":
            if SUSPEND_ANNOTATION not in notes:
                was = "true" if _suspended(obj) else "false"
                patch = _patch(obj, {SUSPEND_ANNOTATION: was}, {"suspend": True})
            elif not _suspended(obj):
                patch = _patch(obj, {}, {"suspend": True})
            else:
                continue
        elif REPLICAS_ANNOTATION not in notes:
            patch = _patch(obj, {REPLICAS_ANNOTATION: str(_replicas(obj))}, {"replicas": 0})
        elif _replicas(obj) != 0:
            patch = _patch(obj, {}, {"replicas": 0})
        else:
            continue
        _send(k, namespace, patch, result)
    return result


def slept_replicas(value: str, *, max_replicas: int) -> int | None:
    """The replica count an annotation asks to restore, bounded by ``0..max_replicas``; None if unreadable."""
    text = value.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 9:
        return None
    return min(int(text), max_replicas)


def wake_namespace(k: Kube, namespace: str, *, max_replicas: int) -> SleepResult:
    """Restore what ``sleep_namespace`` recorded in ``namespace`` and remove the annotations."""
    result = SleepResult()
    for obj in _workloads(k, namespace):
        notes = _annotations(obj)
        unreadable = ""
        spec: dict[str, Any]
        if obj["kind"] == "CronJob":
            if SUSPEND_ANNOTATION not in notes:
                continue
            spec = {"suspend": notes[SUSPEND_ANNOTATION].strip() != "false"} if _suspended(obj) else {}
            patch = _patch(obj, {SUSPEND_ANNOTATION: None}, spec)
        else:
            if REPLICAS_ANNOTATION not in notes:
                continue
            spec = {}
            if _replicas(obj) == 0:
                wanted = slept_replicas(notes[REPLICAS_ANNOTATION], max_replicas=max_replicas)
                if wanted is None:
                    unreadable = _name(obj)
                else:
                    spec = {"replicas": wanted}
            patch = _patch(obj, {REPLICAS_ANNOTATION: None}, spec)
        if _send(k, namespace, patch, result) and unreadable:  # else the annotation is there for the next pass
            result.unreadable.append(unreadable)
    return result
