"""The Celery app. Imports nothing of the domain: tasks are found by name."""

import os
from typing import Any

from celery import Celery, signals

from portal import metrics_dir

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("berth")
# The current app in every thread: tenants.dispatch sends through celery.current_app, never importing this module.
app.set_default()
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["worker"])


@signals.celeryd_init.connect
def _fresh_metrics(**_: Any) -> None:
    metrics_dir.clear()
