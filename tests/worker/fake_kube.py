"""An in-memory stand-in for ``worker.kube.Kube``: one API server's objects in a dict, for unit tests.

It keeps what the verbs Berth uses need and nothing more: server-side apply stores the object (keeping
its UID, status and deletion mark), ``create`` answers 409 for an existing name, ``delete`` checks the
UID precondition, ``list`` filters by ``key=value`` label selectors. What controllers do on a real
cluster is explicit here:

- namespaces are Active as soon as they exist (``terminating`` marks them deleted but present);
- a ResourceQuota gets ``status.hard`` only once ``observe_quotas()`` has run (the quota controller), or at
  once with ``observe_quotas_on_apply``;
- admission refuses every server-side dry run naming each ValidatingAdmissionPolicy that has a binding,
  which is what ``guards_not_in_force`` looks for; with ``guards_enforced = False`` it admits them.

``fail_next`` makes the next call raise a given error, ``refuse[kind]`` every apply of that kind (Kubernetes
errors as the real client raises them). ``requests`` counts API requests as the real client would send them:
one per verb call, one per object applied, one per page listed.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Sequence
from typing import Any

from worker.kube import LIST_PAGE_SIZE, Kube, KubeForbidden, KubePermanentError, Manifest

KubeKey = tuple[str, str, str]  # kind, namespace ('' for cluster-scoped), name
_servers = itertools.count(1)


class FakeKube(Kube):
    def __init__(self) -> None:
        # No API client: every verb is answered here. A fresh server name each time, because
        # worker.backends.namespace caches per server which guards it saw in force.
        self._api = None
        self.server = f"https://fake-{next(_servers)}.invalid:6443"
        self.requests = 0
        self.objects: dict[KubeKey, Manifest] = {}
        self.guards_enforced = True
        self.observe_quotas_on_apply = False  # a quota controller quicker than the next request
        self.fail_next: Exception | None = None
        self.refuse: dict[str, Exception] = {}  # kind -> what the server answers to applying one
        self.writes: list[str] = []  # "apply Kind/name", "create Kind/name", "delete Kind/name", in order
        self._uids = itertools.count(1)
        self.put({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}})

    # --- what the tests set up and look at ------------------------------------------------------------
    def put(self, obj: Manifest) -> Manifest:
        """Store ``obj`` as someone else (not Berth) would have created it; returns it with its UID."""
        stored = copy.deepcopy(obj)
        stored["metadata"].setdefault("uid", f"uid-{next(self._uids)}")
        self.objects[_key(stored)] = stored
        return stored

    def observe_quotas(self) -> None:
        """What the quota controller does: report every ResourceQuota's hard limits in its status."""
        for obj in self.objects.values():
            if obj["kind"] == "ResourceQuota":
                obj["status"] = {"hard": dict(obj["spec"].get("hard", {})), "used": {}}

    def named(self, kind: str) -> list[str]:
        return sorted(meta["name"] for meta in (o["metadata"] for o in self.objects.values() if o["kind"] == kind))

    def _maybe_fail(self, requests: int = 1) -> None:
        self.requests += requests
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error

    # --- the verbs ------------------------------------------------------------------------------------------
    def _apply(self, objs: Iterable[Manifest], *, dry_run: bool = False) -> list[Manifest | None]:
        results: list[Manifest | None] = []
        for obj in objs:
            self._maybe_fail()
            if obj["kind"] in self.refuse:
                raise self.refuse[obj["kind"]]
            key = _key(obj)
            live = self.objects.get(key)
            want_uid = obj["metadata"].get("uid")
            if want_uid and (live is None or live["metadata"]["uid"] != want_uid):
                raise KubePermanentError(
                    f"apply {obj['kind']}/{key[2]}: Precondition failed: UID in precondition: {want_uid}", status=409
                )
            stored = copy.deepcopy(obj)
            stored["metadata"]["uid"] = live["metadata"]["uid"] if live else f"uid-{next(self._uids)}"
            for kept in ("status",):
                if live is not None and kept in live:
                    stored[kept] = live[kept]
            if live is not None and live["metadata"].get("deletionTimestamp"):
                stored["metadata"]["deletionTimestamp"] = live["metadata"]["deletionTimestamp"]
            if self.observe_quotas_on_apply and obj["kind"] == "ResourceQuota":
                stored["status"] = {"hard": dict(obj["spec"].get("hard", {})), "used": {}}
            if not dry_run:
                self.objects[key] = stored
                self.writes.append(f"apply {obj['kind']}/{key[2]}")
            results.append(self._as_served(stored, obj["kind"]))
        return results

    def _create(self, obj: Manifest, *, dry_run: bool = False) -> Manifest | None:
        self._maybe_fail()
        if dry_run:
            self._admit(obj)
            return copy.deepcopy(obj)
        key = _key(obj)
        if key in self.objects:
            raise KubePermanentError(f"create {obj['kind']}/{key[2]}: already exists", status=409)
        self.writes.append(f"create {obj['kind']}/{key[2]}")
        return copy.deepcopy(self.put(obj))

    def _admit(self, obj: Manifest) -> None:
        if not self.guards_enforced:
            return
        bound = {
            o["spec"]["policyName"] for o in self.objects.values() if o["kind"] == "ValidatingAdmissionPolicyBinding"
        }
        if bound:
            names = ", ".join(f"'{name}'" for name in sorted(bound))
            raise KubeForbidden(f"create {obj['kind']}: denied by ValidatingAdmissionPolicy {names}", status=403)

    def _get(self, kind: str, name: str, *, namespace: str | None = None) -> Manifest | None:
        self._maybe_fail()
        live = self.objects.get((kind, namespace or "", name))
        return None if live is None else self._as_served(live, kind)

    @staticmethod
    def _as_served(stored: Manifest, kind: str) -> Manifest:
        """A copy as the server answers with it: a Namespace with its phase."""
        found = copy.deepcopy(stored)
        if kind == "Namespace":
            terminating = bool(found["metadata"].get("deletionTimestamp"))
            found["status"] = {"phase": "Terminating" if terminating else "Active"}
        return found

    def list(
        self, kind: str, *, namespace: str | None = None, label_selector: str = "", page_size: int = LIST_PAGE_SIZE
    ) -> list[Manifest]:
        wanted = dict(part.split("=", 1) for part in label_selector.split(",") if part)
        found = [
            copy.deepcopy(o)
            for (k, ns, _), o in sorted(self.objects.items())
            if k == kind
            and (namespace is None or ns == namespace)
            and all((o["metadata"].get("labels") or {}).get(lk) == lv for lk, lv in wanted.items())
        ]
        self._maybe_fail(requests=max(1, -(-len(found) // page_size)))
        return found

    def _delete(self, kind: str, name: str, *, namespace: str | None = None, uid: str = "") -> bool:
        self._maybe_fail()
        key = (kind, namespace or "", name)
        live = self.objects.get(key)
        if live is None or (uid and live["metadata"]["uid"] != uid):
            return False
        self.writes.append(f"delete {kind}/{name}")
        del self.objects[key]
        if kind == "Namespace":
            for other in [k for k in self.objects if k[1] == name]:
                del self.objects[other]
        return True

    def can_i(self, *, verb: str, resource: str, group: str = "", namespace: str = "", subresource: str = "") -> bool:
        self._maybe_fail()
        return True

    def request_token(
        self, *, namespace: str, service_account: str, lifetime_seconds: int, audiences: Sequence[str] | None = None
    ) -> tuple[str, str]:
        raise NotImplementedError("tokens are not part of provisioning")


def _key(obj: Manifest) -> KubeKey:
    meta: dict[str, Any] = obj["metadata"]
    return (str(obj["kind"]), str(meta.get("namespace") or ""), str(meta["name"]))
