"""The one module that talks to Kubernetes (and the only importer of ``kubernetes``).

A few idempotent verbs over plain dicts: ``apply`` (server-side apply, field
manager ``berth``), ``get``, ``list``, ``watch``, ``delete``, ``request_token``;
none of them waits for anything (a caller that finds the cluster not ready yet
comes back later) except ``watch``, a stream the watcher (worker.watcher)
reads. ``ApiException`` becomes ``KubeTransientError`` (429, 5xx, connection
trouble: retry later) or ``KubePermanentError`` (other 4xx, with the server's
message: a person must act; ``KubeGone`` for 410, a watch to list again).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Generic, TypeVar

import urllib3
import yaml
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.utils.quantity import parse_quantity

FIELD_MANAGER = "berth"
# Names as the API server allows them: nothing else is put into a request's path.
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# Objects per page of a list: large enough that a reconcile pass over a thousand tenants takes a page or two
# per kind, small enough that no single answer holds the API server's memory for long.
LIST_PAGE_SIZE = 2000
# A Kubernetes object or kubeconfig as plain JSON-like data.
Manifest = dict[str, Any]
Manifests = list[Manifest]
# The kubernetes client has no type hints: these are typed where Berth calls them.
_parse_quantity: Callable[[str], Decimal] = parse_quantity
_kube_config: Any = config
T = TypeVar("T")


class KubeError(Exception):
    def __init__(self, message: str, *, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class KubeTransientError(KubeError):
    """Worth retrying: the cluster is unreachable, overloaded or failing."""


class KubePermanentError(KubeError):
    """The server refused the request; retrying the same thing will not help."""


class KubeForbidden(KubePermanentError):
    """403: RBAC, admission or quota refused (the isolation checks expect these)."""


class KubeGone(KubePermanentError):
    """410: the resourceVersion a watch asked for is no longer in the server's history (compacted); list again."""


@dataclass(frozen=True)
class WatchEvent:
    """One event of a watch: ADDED, MODIFIED, DELETED or BOOKMARK (which carries only a resourceVersion)."""

    type: str
    object: Manifest

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")


@dataclass(frozen=True)
class Kind:
    api_version: str
    plural: str
    namespaced: bool


# The kinds Berth creates or reads; anything else is a programming error.
KINDS: dict[str, Kind] = {
    "Namespace": Kind("v1", "namespaces", False),
    "Node": Kind("v1", "nodes", False),  # read only: where the isolation report's packets must not get to
    "ServiceAccount": Kind("v1", "serviceaccounts", True),
    "ResourceQuota": Kind("v1", "resourcequotas", True),
    "LimitRange": Kind("v1", "limitranges", True),
    "ConfigMap": Kind("v1", "configmaps", True),
    "Secret": Kind("v1", "secrets", True),
    "Pod": Kind("v1", "pods", True),
    "Event": Kind("v1", "events", True),  # read only, with the team's identity (worker/workload.py)
    "Service": Kind("v1", "services", True),
    "Endpoints": Kind("v1", "endpoints", True),
    "EndpointSlice": Kind("discovery.k8s.io/v1", "endpointslices", True),
    "Ingress": Kind("networking.k8s.io/v1", "ingresses", True),
    "PersistentVolumeClaim": Kind("v1", "persistentvolumeclaims", True),
    "Deployment": Kind("apps/v1", "deployments", True),
    "StatefulSet": Kind("apps/v1", "statefulsets", True),
    "CronJob": Kind("batch/v1", "cronjobs", True),
    "NetworkPolicy": Kind("networking.k8s.io/v1", "networkpolicies", True),
    "Role": Kind("rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": Kind("rbac.authorization.k8s.io/v1", "rolebindings", True),
    "ClusterRole": Kind("rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": Kind("rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "FlowSchema": Kind("flowcontrol.apiserver.k8s.io/v1", "flowschemas", False),
    "PriorityClass": Kind("scheduling.k8s.io/v1", "priorityclasses", False),
    "StorageClass": Kind("storage.k8s.io/v1", "storageclasses", False),
    "CustomResourceDefinition": Kind("apiextensions.k8s.io/v1", "customresourcedefinitions", False),
    "ValidatingAdmissionPolicy": Kind("admissionregistration.k8s.io/v1", "validatingadmissionpolicies", False),
    "ValidatingAdmissionPolicyBinding": Kind(
        "admissionregistration.k8s.io/v1", "validatingadmissionpolicybindings", False
    ),
    # Virtual-cluster backends' custom resources (installed on the host by the platform admin).
    "HelmRepository": Kind("source.toolkit.fluxcd.io/v1", "helmrepositories", True),
    "HelmRelease": Kind("helm.toolkit.fluxcd.io/v2", "helmreleases", True),
    "Cluster": Kind("cluster.x-k8s.io/v1beta2", "clusters", True),
    "VCluster": Kind("infrastructure.cluster.x-k8s.io/v1alpha1", "vclusters", True),
    "VirtualCluster": Kind("tenancy.x-k8s.io/v1alpha1", "virtualclusters", True),
    "ClusterVersion": Kind("tenancy.x-k8s.io/v1alpha1", "clusterversions", False),
    "HostedCluster": Kind("hypershift.openshift.io/v1beta1", "hostedclusters", True),
    "NodePool": Kind("hypershift.openshift.io/v1beta1", "nodepools", True),
    "Workspace": Kind("tenancy.kcp.io/v1alpha1", "workspaces", False),
}


def _path(
    kind: str, name: str | None = None, namespace: str | None = None, subresource: str = "", *, every: bool = False
) -> str:
    """The object's (or with no name, the collection's) path; ``every``: the collection across all namespaces."""
    try:
        k = KINDS[kind]
    except KeyError:
        raise KubePermanentError(f"Berth does not manage {kind} objects.") from None
    base = "/api/v1" if k.api_version == "v1" else f"/apis/{k.api_version}"
    if k.namespaced and not (every and namespace is None and name is None):
        if not namespace:
            raise KubePermanentError(f"{kind} is namespaced; no namespace given.")
        base += f"/namespaces/{namespace}"
    path = f"{base}/{k.plural}"
    if name:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path


def _from_status(status: int, data: bytes | None, reason: str | None, what: str) -> KubeError:
    try:
        message = str(json.loads(data or b"{}").get("message") or reason)
    except (ValueError, TypeError, AttributeError):
        message = str(reason)
    msg = f"{what}: {message}"
    if status == 429 or status >= 500:
        return KubeTransientError(msg, status=status, reason=str(reason))
    if status == 403:
        return KubeForbidden(msg, status=status, reason=str(reason))
    if status == 410:
        return KubeGone(msg, status=status, reason=str(reason))
    return KubePermanentError(msg, status=status, reason=str(reason))


def _translate(exc: Exception, what: str) -> KubeError:
    if isinstance(exc, ApiException):
        return _from_status(
            exc.status or 503, (exc.body or "").encode() if isinstance(exc.body, str) else exc.body, exc.reason, what
        )
    # urllib3 / socket / TLS trouble: the cluster is not reachable right now.
    return KubeTransientError(f"{what}: cluster unreachable ({type(exc).__name__})")


# What the server answered during one provisioning step, by (kind, namespace, name): the object, or None for
# "there is none" (see one_step()).
_seen: contextvars.ContextVar[dict[tuple[str, str, str], Manifest | None] | None] = contextvars.ContextVar(
    "berth_step", default=None
)


def _key(obj: Manifest) -> tuple[str, str, str]:
    meta = obj.get("metadata") or {}
    return (str(obj.get("kind", "")), str(meta.get("namespace") or ""), str(meta.get("name", "")))


@contextlib.contextmanager
def one_step() -> Iterator[None]:
    """Within the block, what the server answered (to an apply, a create or a get, including "there is none") is
    taken as current for later gets; a patch or a delete forgets the object.

    One provisioning step takes milliseconds: reading back an object it has just applied or read tells nothing
    new, except what a controller fills in later (a quota's status), which is read with ``get(fresh=True)``.
    Per thread and task (a context variable), so clients shared between threads never share answers.
    """
    token = _seen.set({})
    try:
        yield
    finally:
        _seen.reset(token)


class Kube:
    """Verbs against one API server with one identity."""

    def __init__(self, api_client: client.ApiClient, *, server: str) -> None:
        self._api: Any = api_client
        self.server = server
        self.requests = 0  # API requests made; the benchmark reads it

    # --- construction ---------------------------------------------------------------
    @classmethod
    def from_kubeconfig_dict(cls, kubeconfig: Manifest, *, timeout: float = 15.0) -> Kube:
        cfg = client.Configuration()
        loader = _kube_config.kube_config.KubeConfigLoader(config_dict=kubeconfig)
        loader.load_and_set(cfg)
        return cls._build(cfg, timeout)

    @classmethod
    def from_token(cls, *, server: str, ca_pem: str, token: str, timeout: float = 15.0) -> Kube:
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        }
        return cls.from_kubeconfig_dict(kubeconfig, timeout=timeout)

    @classmethod
    def _build(cls, cfg: client.Configuration, timeout: float) -> Kube:
        cfg.retries = urllib3.Retry(total=0, connect=0, read=0, redirect=0)
        api = client.ApiClient(cfg)
        api.user_agent = "berth-worker"
        kube = cls(api, server=cfg.host)
        kube._timeout = timeout
        return kube

    _timeout: float = 15.0

    def with_token(self, token: str) -> Kube:
        """The same server and CA, acting as the holder of ``token`` (no client certificate)."""
        cfg = copy.copy(self._api.configuration)
        cfg.cert_file = cfg.key_file = None
        # A kubeconfig with a token installs a hook that puts that token back before every request.
        cfg.refresh_api_key_hook = None
        cfg.api_key = {"authorization": f"Bearer {token}"}
        cfg.api_key_prefix = {}
        return Kube._build(cfg, self._timeout)

    def with_user_agent(self, agent: str) -> Kube:
        """The same server and identity, naming itself ``agent`` (the API server counts requests by it)."""
        kube = Kube._build(copy.copy(self._api.configuration), self._timeout)
        kube._api.user_agent = agent
        return kube

    def with_timeout(self, seconds: float) -> Kube:
        """The same server and identity, giving up on each request after ``seconds``."""
        return Kube._build(copy.copy(self._api.configuration), seconds)

    def bearer(self) -> str:
        """The bearer token this client sends, or '' for certificate clients."""
        value = (self._api.configuration.api_key or {}).get("authorization", "")
        return str(value).removeprefix("Bearer ").strip()

    def impersonating(self, *, user: str, group: str) -> Kube:
        """This identity impersonating ``user`` in ``group`` (needs impersonate rights, e.g. cluster admin)."""
        kube = Kube._build(copy.copy(self._api.configuration), self._timeout)
        kube._api.set_default_header("Impersonate-User", user)
        kube._api.set_default_header("Impersonate-Group", group)
        return kube

    def ca_pem(self) -> str:
        """The CA this client trusts, to embed in kubeconfigs handed out."""
        path = self._api.configuration.ssl_ca_cert
        if not path:
            return ""
        with open(path) as fh:
            return fh.read()

    # --- raw call ----------------------------------------------------------------------
    def _send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        what: str = "",
    ) -> Any:
        """The server's 2xx answer, read whole; anything else raised as a KubeError (with the server's message)."""
        self.requests += 1
        what = what or f"{method} {path}"
        headers = {"Accept": accept, "Content-Type": content_type}
        try:
            method, url, headers, body, _ = self._api.param_serialize(
                method,
                path,
                query_params=query or [],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            resp = self._api.call_api(method, url, header_params=headers, body=body, _request_timeout=self._timeout)
            resp.read()
        except Exception as exc:
            raise _translate(exc, what) from None
        if not 200 <= resp.status < 300:
            raise _from_status(resp.status, resp.data, resp.reason, what)
        return resp

    def _call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
        what: str = "",
    ) -> Manifest | None:
        resp = self._send(method, path, body=body, query=query, content_type=content_type, what=what)
        if not resp.data or "json" not in (resp.getheader("Content-Type") or ""):
            return None  # e.g. /readyz answers a plain-text "ok"
        data: Manifest = json.loads(resp.data)
        return data

    # --- verbs -------------------------------------------------------------------------
    def apply(self, objs: Iterable[Manifest], *, dry_run: bool = False) -> list[Manifest | None]:
        """Server-side apply each object (idempotent); returns what the server holds.

        A field the object's schema does not declare is refused (Strict) rather than dropped with a warning, so
        what Berth renders is what the cluster keeps.
        """
        results = self._apply(objs, dry_run=dry_run)
        seen = _seen.get()
        if seen is not None and not dry_run:
            seen.update((_key(found), found) for found in results if found)
        return results

    def get(self, kind: str, name: str, *, namespace: str | None = None, fresh: bool = False) -> Manifest | None:
        """The object, or None when there is none. Within ``one_step()``, an object the server answered with
        earlier in the step is taken from that answer unless ``fresh`` (for what controllers fill in)."""
        seen = _seen.get()
        key = (kind, namespace or "", name)
        if seen is not None and not fresh and key in seen:
            return copy.deepcopy(seen[key])
        found = self._get(kind, name, namespace=namespace)
        if seen is not None:
            seen[key] = found
        return found

    def delete(self, kind: str, name: str, *, namespace: str | None = None, uid: str = "") -> bool:
        """Delete if present; False when it was already gone, or (with ``uid``) is no longer that object.

        ``uid`` is a precondition the API server checks atomically: an object someone else made under the
        same name since is never deleted.
        """
        seen = _seen.get()
        if seen is not None:
            seen.pop((kind, namespace or "", name), None)
        return self._delete(kind, name, namespace=namespace, uid=uid)

    def _apply(self, objs: Iterable[Manifest], *, dry_run: bool = False) -> list[Manifest | None]:
        results = []
        for obj in objs:
            meta = obj["metadata"]
            query = [("fieldManager", FIELD_MANAGER), ("force", "true"), ("fieldValidation", "Strict")]
            if dry_run:
                query.append(("dryRun", "All"))
            results.append(
                self._call(
                    "PATCH",
                    _path(obj["kind"], meta["name"], meta.get("namespace")),
                    body=json.dumps(obj),
                    query=query,
                    content_type="application/apply-patch+yaml",
                    what=f"apply {obj['kind']}/{meta['name']}",
                )
            )
        return results

    def create(self, obj: Manifest, *, dry_run: bool = False) -> Manifest | None:
        """POST the object (409 when the name is taken); returns what the server holds."""
        seen = _seen.get()
        if seen is None or dry_run:
            return self._create(obj, dry_run=dry_run)
        seen.pop(_key(obj), None)
        created = self._create(obj, dry_run=False)
        if created:
            seen[_key(created)] = created
        return created

    def _create(self, obj: Manifest, *, dry_run: bool = False) -> Manifest | None:
        meta = obj["metadata"]
        query = [("dryRun", "All")] if dry_run else []
        return self._call(
            "POST",
            _path(obj["kind"], None, meta.get("namespace")),
            body=obj,
            query=query,
            what=f"create {obj['kind']}/{meta.get('name', meta.get('generateName', ''))}",
        )

    def patch(
        self, kind: str, name: str, patch: Manifest, *, namespace: str | None = None, dry_run: bool = False
    ) -> Manifest | None:
        query = [("dryRun", "All")] if dry_run else []
        seen = _seen.get()
        if seen is not None and not dry_run:
            seen.pop((kind, namespace or "", name), None)
        return self._call(
            "PATCH",
            _path(kind, name, namespace),
            body=patch,
            query=query,
            content_type="application/merge-patch+json",
            what=f"patch {kind}/{name}",
        )

    def _get(self, kind: str, name: str, *, namespace: str | None = None) -> Manifest | None:
        try:
            return self._call("GET", _path(kind, name, namespace), what=f"get {kind}/{name}")
        except KubePermanentError as exc:
            if exc.status == 404:
                return None
            raise

    def list_first(self, kind: str, *, namespace: str, limit: int) -> list[Manifest]:
        """At most ``limit`` objects of ``kind`` in ``namespace``: one page, in the server's (name) order."""
        data = self._call("GET", _path(kind, None, namespace), query=[("limit", str(limit))], what=f"list {kind}")
        return [{"kind": kind, **item} for item in (data or {}).get("items") or []]

    def list(
        self, kind: str, *, namespace: str | None = None, label_selector: str = "", page_size: int = LIST_PAGE_SIZE
    ) -> list[Manifest]:
        """Every object of ``kind`` (in ``namespace``, or all namespaces), in pages of ``page_size``; each item
        carries its ``kind`` (the API server leaves it out of list items)."""
        return self.list_versioned(kind, namespace=namespace, label_selector=label_selector, page_size=page_size)[0]

    def list_versioned(
        self, kind: str, *, namespace: str | None = None, label_selector: str = "", page_size: int = LIST_PAGE_SIZE
    ) -> tuple[Manifests, str]:
        """``list``, and the collection's resourceVersion: where a watch of the same selector starts."""
        query = [("labelSelector", label_selector)] if label_selector else []
        query.append(("limit", str(page_size)))
        items: Manifests = []
        token = ""
        while True:
            page = query + ([("continue", token)] if token else [])
            path = _path(kind, None, namespace, every=True)
            data = self._call("GET", path, query=page, what=f"list {kind}") or {}
            items += ({"kind": kind, **item} for item in data.get("items") or [])
            meta = data.get("metadata") or {}
            token = str(meta.get("continue") or "")
            if not token:
                return items, str(meta.get("resourceVersion") or "")

    def watch(
        self, kind: str, *, resource_version: str, label_selector: str = "", timeout_seconds: int = 300
    ) -> Iterator[WatchEvent]:
        """The changes to ``kind`` (all namespaces) after ``resource_version``, as the server streams them, with
        bookmarks, until the server ends the watch (after about ``timeout_seconds``).

        A dropped or silent connection raises ``KubeTransientError`` (resume from the last resourceVersion seen);
        a resourceVersion too old for the server's history raises ``KubeGone``, whether the server says so before
        the stream (410) or in it (an ERROR event): list again. Each event's object carries its ``kind``.
        """
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        what = f"watch {kind}"
        self.requests += 1
        try:
            method, url, headers, _, _ = self._api.param_serialize(
                "GET",
                _path(kind, every=True),
                query_params=query,
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
            )
            # The read timeout outlasts the server's bookmarks (about one a minute): silence longer than that is a
            # dead connection.
            resp = self._api.call_api(method, url, header_params=headers, _request_timeout=(self._timeout, 150.0))
        except Exception as exc:
            raise _translate(exc, what) from None
        stream = resp.response
        try:
            if not 200 <= resp.status < 300:
                raise _from_status(resp.status, stream.data, resp.reason, what)
            yield from _watch_events(kind, _lines(stream, what), what)
        finally:
            stream.release_conn()

    def pod_log(
        self,
        *,
        namespace: str,
        pod: str,
        container: str = "",
        tail_lines: int,
        limit_bytes: int,
        previous: bool = False,
        since_time: str = "",
    ) -> bytes:
        """A container's log as the kubelet keeps it, each line led by its RFC 3339 timestamp; at most
        ``tail_lines`` lines and ``limit_bytes`` bytes (the server cuts; so does this, should it not)."""
        if len(pod) > 253 or not DNS_SUBDOMAIN.fullmatch(pod) or (container and not DNS_LABEL.fullmatch(container)):
            raise KubePermanentError("Not a pod or container name.", status=400)
        query = [("tailLines", str(tail_lines)), ("limitBytes", str(limit_bytes)), ("timestamps", "true")]
        if container:
            query.append(("container", container))
        if previous:
            query.append(("previous", "true"))
        if since_time:
            query.append(("sinceTime", since_time))
        resp = self._send(
            "GET", _path("Pod", pod, namespace, "log"), query=query, accept="*/*", what=f"log of pod {pod}"
        )
        data = resp.data or b""
        return bytes(data[:limit_bytes])

    def _delete(self, kind: str, name: str, *, namespace: str | None = None, uid: str = "") -> bool:
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self._call("DELETE", _path(kind, name, namespace), body=body, what=f"delete {kind}/{name}")
        except KubePermanentError as exc:
            if exc.status == 404 or (uid and exc.status == 409):
                return False
            raise
        return True

    def request_token(
        self, *, namespace: str, service_account: str, lifetime_seconds: int, audiences: Sequence[str] | None = None
    ) -> tuple[str, str]:
        """A TokenRequest token bound to the ServiceAccount: (token, expiration timestamp)."""
        spec: dict[str, Any] = {"expirationSeconds": int(lifetime_seconds)}
        if audiences:
            spec["audiences"] = [*audiences]
        data = self._call(
            "POST",
            _path("ServiceAccount", service_account, namespace, "token"),
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec},
            what=f"token for {namespace}/{service_account}",
        )
        status = (data or {}).get("status") or {}
        return str(status["token"]), str(status.get("expirationTimestamp", ""))

    def can_i(self, *, verb: str, resource: str, group: str = "", namespace: str = "", subresource: str = "") -> bool:
        """A SelfSubjectAccessReview for this client's own identity."""
        attrs = {"verb": verb, "resource": resource, "group": group}
        if namespace:
            attrs["namespace"] = namespace
        if subresource:
            attrs["subresource"] = subresource
        data = self._call(
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            body={
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attrs},
            },
            what=f"can-i {verb} {resource}",
        )
        return bool(((data or {}).get("status") or {}).get("allowed"))

    def healthy(self) -> bool:
        try:
            self._call("GET", "/readyz", what="readyz")
        except KubeError:
            return False
        return True


def _lines(stream: Any, what: str) -> Iterator[bytes]:
    """The stream's newline-delimited JSON documents, as they arrive."""
    buffered = b""
    try:
        for chunk in stream.stream(65536, decode_content=True):
            buffered += chunk
            *whole, buffered = buffered.split(b"\n")
            yield from (line for line in whole if line.strip())
    except Exception as exc:
        raise _translate(exc, what) from None
    if buffered.strip():
        yield buffered


def _watch_events(kind: str, lines: Iterable[bytes], what: str) -> Iterator[WatchEvent]:
    for line in lines:
        try:
            event = json.loads(line)
            kind_of_event, obj = str(event["type"]), event["object"]
        except (ValueError, KeyError, TypeError):
            raise KubeTransientError(f"{what}: a garbled event") from None
        if kind_of_event == "ERROR":
            status = int(obj.get("code") or 500)
            raise _from_status(status, json.dumps(obj).encode(), str(obj.get("reason") or ""), what)
        yield WatchEvent(kind_of_event, {**obj, "kind": kind})


class PerServer(Generic[T]):
    """Facts about an API server this process read lately: read again once older than ``max_age`` seconds.

    For what changes rarely and is cheap to be briefly stale about (storage classes, the server's identity,
    whether the cluster-wide guards are in place); every periodic reconcile pass reads them afresh.
    """

    def __init__(self, max_age: float) -> None:
        self.max_age = max_age
        self._known: dict[tuple[str, str], tuple[float, T]] = {}
        self._lock = threading.Lock()

    def get(self, k: Kube, read: Callable[[], T], *, key: str = "", fresh: bool = False) -> T:
        now = time.monotonic()
        with self._lock:
            known = self._known.get((k.server, key))
        if known is not None and not fresh and now - known[0] < self.max_age:
            return known[1]
        value = read()
        with self._lock:
            self._known[(k.server, key)] = (now, value)
        return value

    def forget(self, k: Kube, *, key: str = "") -> None:
        with self._lock:
            self._known.pop((k.server, key), None)


_identities: PerServer[str] = PerServer(max_age=60.0)


def cluster_identity(k: Kube, *, cached: bool = False) -> str:
    """Which physical API server ``k`` talks to: its kube-system namespace's UID (with ``cached``, as this
    process read it in the last minute).

    Servers without a kube-system namespace (kcp serves workspaces, not a cluster) are known by URL.
    """

    def read() -> str:
        system = k.get("Namespace", "kube-system")
        if system is None:
            return f"url:{k.server.rstrip('/')}"
        return str(system["metadata"]["uid"])

    return _identities.get(k, read, fresh=not cached)


def same_value(want: Any, have: Any) -> bool:
    """Equal as the API server means it: '8000m' and '8' are the same quantity."""
    if want == have or str(want) == str(have):
        return True
    if isinstance(want, str) and isinstance(have, str):
        try:
            return _parse_quantity(want) == _parse_quantity(have)
        except ValueError:
            return False
    return False


def _b64(text: str) -> str:
    import base64

    return base64.b64encode(text.encode()).decode()


# --- Per-cluster admin clients --------------------------------------------------------

_clients: dict[tuple[Any, ...], Kube] = {}
_lock = threading.Lock()


def load_credential(credential_ref: str) -> Manifest:
    """The kubeconfig a cluster's credential reference points at; never stored in the database."""
    scheme, _, rest = credential_ref.partition(":")
    if scheme == "kubeconfig":
        with open(rest) as fh:
            return _kubeconfig(yaml.safe_load(fh), credential_ref)
    if scheme == "env":
        value = os.environ.get(rest, "")
        if not value:
            raise KubePermanentError(f"Environment variable {rest} (the cluster's credential) is empty.")
        return _kubeconfig(yaml.safe_load(value), credential_ref)
    if scheme == "incluster":
        raise KubePermanentError("In-cluster credentials are resolved by for_cluster.")
    raise KubePermanentError(f"Unknown credential reference scheme {scheme!r}: use kubeconfig:, env: or incluster.")


def _kubeconfig(loaded: object, credential_ref: str) -> Manifest:
    if not isinstance(loaded, dict):
        raise KubePermanentError(f"The cluster's credential {credential_ref} is not a kubeconfig.")
    return loaded


def for_cluster(cluster: Any) -> Kube:
    """The portal's admin client for a registered Cluster, cached per credential."""
    ref = cluster.credential_ref
    stamp: Any = None
    if ref.startswith("kubeconfig:"):
        try:
            stamp = os.stat(ref.split(":", 1)[1]).st_mtime_ns
        except OSError as exc:
            raise KubePermanentError(f"Cluster {cluster.name}: credential file unreadable ({exc.strerror}).") from None
    key = (cluster.pk, ref, stamp, cluster.api_url)
    with _lock:
        kube = _clients.get(key)
        if kube is None:
            if ref == "incluster":
                cfg = client.Configuration()
                _kube_config.load_incluster_config(client_configuration=cfg)
                kube = Kube._build(cfg, 15.0)
            else:
                kube = Kube.from_kubeconfig_dict(load_credential(ref))
            if cluster.api_url:
                kube._api.configuration.host = cluster.api_url.rstrip("/")
                kube.server = kube._api.configuration.host
            _clients[key] = kube
    return kube


def reset_clients() -> None:
    with _lock:
        _clients.clear()
