"""Run the watcher (worker.watcher): per cluster, leader election, then list and watch what Berth manages."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from prometheus_client import start_http_server

from tenants.models import Cluster
from worker import watcher

logger = logging.getLogger(__name__)
# How often the list of clusters is read again, so a cluster registered later is watched without a restart.
CLUSTERS_EVERY_SECONDS = 60.0


class Command(BaseCommand):
    help = __doc__

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--cluster", action="append", default=[], help="a cluster's name (repeatable); default: every cluster"
        )

    def handle(self, *args: object, **options: object) -> None:
        given = options["cluster"]
        names = [str(name) for name in given] if isinstance(given, list) else []
        if names:
            missing = set(names) - set(Cluster.objects.filter(name__in=names).values_list("name", flat=True))
            if missing:
                raise CommandError(f"No such cluster: {', '.join(sorted(missing))}")
        stop = threading.Event()

        def on_signal(signum: int, frame: FrameType | None) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        if settings.BERTH_WATCHER_METRICS_PORT:
            start_http_server(
                settings.BERTH_WATCHER_METRICS_PORT,
                addr=settings.BERTH_WATCHER_METRICS_ADDRESS,
                registry=watcher.REGISTRY,
            )
        if settings.BERTH_WATCHER_HEARTBEAT_FILE:
            threading.Thread(
                target=watcher.keep_heartbeat,
                args=(settings.BERTH_WATCHER_HEARTBEAT_FILE, stop),
                name="heartbeat",
                daemon=True,
            ).start()
        watching: dict[object, threading.Thread] = {}
        while not stop.is_set():
            clusters = Cluster.objects.filter(name__in=names) if names else Cluster.objects.all()
            for cluster in clusters.filter(kinds__contains=["namespace"]).order_by("name"):
                if cluster.pk not in watching:
                    thread = threading.Thread(
                        target=watcher.watch_cluster, args=(cluster, stop), name=f"cluster-{cluster.name}", daemon=True
                    )
                    thread.start()
                    watching[cluster.pk] = thread
                    logger.info("watching cluster %s (or waiting to lead)", cluster.name)
            stop.wait(CLUSTERS_EVERY_SECONDS)
        for thread in watching.values():
            thread.join(timeout=5.0)
