"""The dev cluster's Alertmanager (build.sh alertmanager): routes the tenant alerts Prometheus fires to Berth.

    alertmanager = Alertmanager(directory, bin_dir, port=free_port())
    alertmanager.start(watched=[...])
    alertmanager.route_to("http://127.0.0.1:8000/hooks/alertmanager/", token=...)   # once the portal runs

One webhook receiver, Berth's (POST /hooks/alertmanager/, the bearer token read from a private file), for alerts
labelled ``berth="tenant"`` (tenants/alert_rules.py); anything else goes nowhere. Alerts are grouped by namespace and
alert name, so one tenant's alerts never share a post with another's. Until ``route_to`` names the portal, the
receiver has no webhook and alerts wait in Alertmanager.

It listens on 127.0.0.1 on a free port with its own data directory, gossip off (``--cluster.listen-address=``:
one instance, no peers), and it is one Component: stopped with Prometheus and the rest of the control plane.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from devcluster.kubeconfig import write_private
from devcluster.process import Component, wait_until

RECEIVER = "berth"
# What one post may carry: Berth's receiver refuses more (tenants/alerts.py MAX_ALERTS).
MAX_ALERTS = 200


@dataclass(frozen=True)
class Timing:
    """Alertmanager's notification pacing (route ``group_wait``/``group_interval``/``repeat_interval``); tests
    shorten it, the defaults are Alertmanager's own."""

    group_wait: str = "30s"
    group_interval: str = "5m"
    repeat_interval: str = "4h"


def config(*, url: str | None, token_file: Path, timing: Timing = Timing()) -> dict:
    """alertmanager.yml: tenant alerts to Berth's receiver (none yet when ``url`` is None), the rest to nowhere."""
    berth: dict = {"name": RECEIVER}
    if url is not None:
        berth["webhook_configs"] = [
            {
                "url": url,
                "send_resolved": True,
                "max_alerts": MAX_ALERTS,
                "http_config": {"authorization": {"type": "Bearer", "credentials_file": str(token_file)}},
            }
        ]
    return {
        "route": {
            "receiver": "nowhere",
            "group_by": ["namespace", "alertname"],
            "group_wait": timing.group_wait,
            "group_interval": timing.group_interval,
            "repeat_interval": timing.repeat_interval,
            "routes": [{"receiver": RECEIVER, "matchers": ['berth="tenant"']}],
        },
        "receivers": [{"name": "nowhere"}, berth],
    }


class Alertmanager:
    """One Alertmanager for one dev cluster (see the module's docstring)."""

    def __init__(self, directory: Path, bin_dir: Path, *, port: int) -> None:
        self.directory = directory
        self.bin_dir = bin_dir
        self.port = port
        self.component: Component | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        """host:port, as Prometheus's alerting configuration names it."""
        return f"127.0.0.1:{self.port}"

    @property
    def _config_file(self) -> Path:
        return self.directory / "alertmanager.yml"

    @property
    def _token_file(self) -> Path:
        return self.directory / "berth.token"

    def start(self, *, watched: list[Component]) -> Component:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_private(self._token_file, "unset\n")
        self._write(config(url=None, token_file=self._token_file))
        self.component = Component(
            "alertmanager",
            [
                str(self.bin_dir / "alertmanager"),
                f"--config.file={self._config_file}",
                f"--storage.path={self.directory / 'data'}",
                f"--web.listen-address={self.address}",
                "--cluster.listen-address=",
            ],
            self.directory / "alertmanager.log",
        )
        self.component.start()
        wait_until(
            lambda: self._request("GET", "/-/ready") == 200,
            timeout=60.0,
            watched=[*watched, self.component],
            what="Alertmanager /-/ready",
        )
        return self.component

    def route_to(self, url: str, *, token: str, timing: Timing = Timing()) -> None:
        """Send tenant alerts to Berth's receiver at ``url`` with ``token``; applied at once (``/-/reload``)."""
        write_private(self._token_file, token + "\n")
        self._write(config(url=url, token_file=self._token_file, timing=timing))
        status = self._request("POST", "/-/reload")
        if status != 200:
            raise RuntimeError(f"Alertmanager refused its new configuration ({status}); see its log")

    def alerts(self) -> list[dict]:
        """The alerts Alertmanager holds (its API v2): for tests and the launcher."""
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts", timeout=10) as answer:
            return json.load(answer)

    def stop(self) -> None:
        if self.component is not None:
            self.component.stop()
            self.component = None

    def _write(self, document: dict) -> None:
        temporary = self._config_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(document))  # JSON is YAML
        temporary.replace(self._config_file)

    def _request(self, method: str, path: str) -> int | None:
        try:
            with urllib.request.urlopen(urllib.request.Request(self.url + path, method=method), timeout=5) as answer:
                return answer.status
        except urllib.error.HTTPError as error:
            return error.code
        except (urllib.error.URLError, OSError):
            return None
