from django.apps import AppConfig


class WorkerConfig(AppConfig):
    name = "worker"
    verbose_name = "Berth worker"

    def ready(self) -> None:
        from tenants import hooks
        from worker import (
            events,  # noqa: F401  (registers the events queue's tasks)
            signals,
        )
        from worker.hooks import PortalHooks

        hooks.install(PortalHooks())
        signals.connect()
