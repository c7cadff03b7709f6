"""portal.settings with the environment a test run needs; values here are test-only."""
import os

os.environ.setdefault("DJANGO_DEBUG", "false")
os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-secret-key-" + "k" * 40)
os.environ.setdefault("DJANGO_SECURE_SSL_REDIRECT", "false")
os.environ.setdefault("EMAIL_URL", "memorymail://")
os.environ.setdefault("OIDC_RP_CLIENT_SECRET", "test-client-secret")
os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")

from portal.settings import *  # noqa: E402,F401,F403

# Tests run over plain http on loopback.
SESSION_COOKIE_SECURE = False
CSRF_COOKIE_SECURE = False
STORAGES["staticfiles"]["BACKEND"] = "django.contrib.staticfiles.storage.StaticFilesStorage"  # noqa: F405

# WhiteNoise warns on every request when STATIC_ROOT is missing; tests never collect static files.
import tempfile  # noqa: E402

STATIC_ROOT = tempfile.mkdtemp(prefix="berth-test-static-")
