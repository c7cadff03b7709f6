"""portal.settings with the environment a test run needs; values here are test-only."""

import os

os.environ.setdefault("DJANGO_DEBUG", "false")
os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-secret-key-" + "k" * 40)
os.environ.setdefault("DJANGO_SECURE_SSL_REDIRECT", "false")
os.environ.setdefault("EMAIL_URL", "memorymail://")
os.environ.setdefault("OIDC_RP_CLIENT_SECRET", "test-client-secret")
os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
# Webhook receivers in tests listen on 127.0.0.1 (and nothing else on loopback is allowed); retries come quickly.
os.environ.setdefault("BERTH_WEBHOOK_ALLOWED_NETWORKS", "127.0.0.1/32")
os.environ.setdefault("BERTH_WEBHOOK_RETRY_SECONDS", "0.3")
os.environ.setdefault("BERTH_WEBHOOK_RETRY_MAX_SECONDS", "2")
os.environ.setdefault("BERTH_WEBHOOK_MAX_ATTEMPTS", "4")
os.environ.setdefault("BERTH_WEBHOOK_TIMEOUT_SECONDS", "20")
os.environ.setdefault("BERTH_WEBHOOK_MAX_IN_FLIGHT", "2")
# The test bed's Prometheus names the kubelet's endpoints as three jobs (devcluster/prometheus.py SOURCES).
os.environ.setdefault("BERTH_KUBELET_JOB", "kubelet|cadvisor|resource")

from portal.settings import *  # noqa: F403

# Tests run over plain http on loopback.
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
STORAGES["staticfiles"]["BACKEND"] = "django.contrib.staticfiles.storage.StaticFilesStorage"  # noqa: F405

# WhiteNoise warns on every request when STATIC_ROOT is missing; tests never collect static files. One
# directory shared by every test process (not a new temporary one per process, which piled up in /tmp).
STATIC_ROOT = BASE_DIR / "test-output" / "static"  # noqa: F405
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
