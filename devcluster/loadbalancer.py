"""The dev cluster's load balancer: what MetalLB does on a real network, for the nodes' network.

A Service of type LoadBalancer without a ``loadBalancerClass`` gets an address from this run's pool (the upper
half of the node network, ``ClusterNetwork.load_balancer_pool``) in its ``status.loadBalancer``; the host routes
the pool through the first node, where kube-proxy forwards an address's traffic to the Service's endpoints, as
it does for any load balancer address. So the host (the portal, the worker, the tests, a developer's kubectl)
reaches a LoadBalancer Service at its address as a client outside a real cluster would. The Service's
``spec.loadBalancerIP`` is honoured when it is a free address of the pool. An address goes back to the pool
when its Service is deleted or stops being a LoadBalancer.

It runs as a thread of the process that started the cluster: it lists the Services, then watches them, and
relists after any error.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import socket
import ssl
import threading
from typing import Any

log = logging.getLogger(__name__)
MERGE_PATCH = "application/merge-patch+json"
WATCH_SECONDS = 300


class LoadBalancer:
    """Hands out the pool's addresses to LoadBalancer Services; ``start`` and ``stop`` it with the cluster."""

    def __init__(self, *, host: str, port: int, context: ssl.SSLContext, pool: ipaddress.IPv4Network) -> None:
        self._host, self._port, self._context = host, port, context
        self._addresses = [str(address) for address in pool.hosts()]
        self._stopping = threading.Event()
        self._connection: http.client.HTTPSConnection | None = None
        self._thread = threading.Thread(target=self._run, name="devcluster-load-balancer", daemon=True)
        self.assigned: dict[tuple[str, str], str] = {}  # (namespace, name) -> address

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        connection = self._connection
        if connection is not None and connection.sock is not None:
            try:
                connection.sock.shutdown(socket.SHUT_RDWR)  # ends a watch blocked in a read
            except OSError:
                pass
        self._thread.join(timeout=5)

    # -- the loop --------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                version = self._list()
                self._watch(version)
            except (OSError, http.client.HTTPException, ValueError) as error:
                if not self._stopping.is_set():
                    log.debug("load balancer: relisting after %s", error)
                    self._stopping.wait(1.0)

    def _list(self) -> str:
        status, body = self._request("GET", "/api/v1/services")
        if status != 200:
            raise ValueError(f"listing Services answered {status}")
        services = json.loads(body)
        self.assigned = {}
        pending = []
        for service in services.get("items", []):
            address = self._address_of(service)
            if address is not None:
                self.assigned[_key(service)] = address
            elif _wants_address(service):
                pending.append(service)
        for service in pending:
            self._assign(service)
        return str(services["metadata"]["resourceVersion"])

    def _watch(self, version: str) -> None:
        connection = self._connect(timeout=WATCH_SECONDS + 30)
        self._connection = connection
        try:
            connection.request(
                "GET", f"/api/v1/services?watch=1&resourceVersion={version}&timeoutSeconds={WATCH_SECONDS}"
            )
            response = connection.getresponse()
            if response.status != 200:
                raise ValueError(f"watching Services answered {response.status}")
            while not self._stopping.is_set():
                line = response.readline()
                if not line:
                    return  # the server ended the watch: relist
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    return  # e.g. 410 Gone: relist
                self._on_event(event["type"], event["object"])
        finally:
            self._connection = None
            connection.close()

    def _on_event(self, kind: str, service: dict[str, Any]) -> None:
        key = _key(service)
        if kind == "DELETED":
            self.assigned.pop(key, None)
            return
        address = self._address_of(service)
        if address is not None:
            self.assigned[key] = address
            return
        self.assigned.pop(key, None)
        if _wants_address(service):
            self._assign(service)

    # -- addresses -------------------------------------------------------------

    def _address_of(self, service: dict[str, Any]) -> str | None:
        """The pool address a LoadBalancer Service already has, else None."""
        if not _wants_address(service):
            return None
        for ingress in ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []:
            if ingress.get("ip") in self._addresses:
                return str(ingress["ip"])
        return None

    def _assign(self, service: dict[str, Any]) -> None:
        taken = set(self.assigned.values())
        wanted = (service.get("spec") or {}).get("loadBalancerIP") or ""
        if wanted:
            if wanted not in self._addresses or wanted in taken:
                log.warning("load balancer: %s/%s asks for %s, which is not free", *_key(service), wanted)
                return
            address = wanted
        else:
            free = [a for a in self._addresses if a not in taken]
            if not free:
                log.warning("load balancer: no address left for %s/%s", *_key(service))
                return
            address = free[0]
        namespace, name = _key(service)
        patch = {"status": {"loadBalancer": {"ingress": [{"ip": address, "ipMode": "VIP"}]}}}
        status, body = self._request(
            "PATCH", f"/api/v1/namespaces/{namespace}/services/{name}/status", json.dumps(patch).encode(), MERGE_PATCH
        )
        if status == 200:
            self.assigned[(namespace, name)] = address
        elif status != 404:  # a Service deleted meanwhile needs nothing
            raise ValueError(f"setting the address of Service {namespace}/{name} answered {status}: {body[:200]!r}")

    # -- HTTP ------------------------------------------------------------------

    def _connect(self, timeout: float) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection(self._host, self._port, context=self._context, timeout=timeout)

    def _request(self, method: str, path: str, body: bytes | None = None, content_type: str = "") -> tuple[int, bytes]:
        connection = self._connect(timeout=10)
        try:
            headers = {"Content-Type": content_type} if content_type else {}
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()


def _key(service: dict[str, Any]) -> tuple[str, str]:
    return service["metadata"]["namespace"], service["metadata"]["name"]


def _wants_address(service: dict[str, Any]) -> bool:
    spec = service.get("spec") or {}
    return spec.get("type") == "LoadBalancer" and not spec.get("loadBalancerClass")
