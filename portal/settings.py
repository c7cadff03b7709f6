"""Berth settings: every value comes from the environment (see .env.example).

Secrets have no default outside DEBUG; each secret may also be given as
``NAME_FILE`` pointing at a mounted file.
"""

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import environ
from django.core.exceptions import ImproperlyConfigured
from kombu import Queue

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)


def secret(name: str, debug_default: str = "", *, required: bool = True) -> str:
    """A secret from ``NAME`` or the file named by ``NAME_FILE``; only DEBUG (or an optional one) may fall back."""
    path = env.str(f"{name}_FILE", default="")
    if path:
        return Path(path).read_text().strip()
    if DEBUG or not required:
        return env.str(name, default=debug_default)
    return env.str(name)


# --- Core -------------------------------------------------------------------
DEBUG = env.bool("DJANGO_DEBUG", default=False)
SECRET_KEY = secret("DJANGO_SECRET_KEY", debug_default="insecure-dev-only-key-" + "x" * 40)
# Seals secrets Berth keeps in the database (the provider's refresh tokens); default: derived from SECRET_KEY.
BERTH_SECRETS_KEY = secret("BERTH_SECRETS_KEY", required=False)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])
BERTH_PUBLIC_URL = env.str("BERTH_PUBLIC_URL", default="http://127.0.0.1:8000").rstrip("/")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "pgtrigger",
    "csp",
    "mozilla_django_oidc",
    "tenants",
    "worker",
]

MIDDLEWARE = [
    "tenants.middleware.HealthzMiddleware",
    "tenants.middleware.MetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "tenants.middleware.RequestIdMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "tenants.middleware.OidcSessionRefresh",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"
AUTH_USER_MODEL = "tenants.User"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "tenants.views.context.portal_context",
            ],
        },
    },
]

# --- Database ---------------------------------------------------------------
# PostgreSQL only: the audit trail's append-only guarantee is a PostgreSQL trigger.
DATABASES = {"default": env.db("DATABASE_URL", default="postgres:///berth")}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DATABASE_CONN_MAX_AGE", default=0)

# --- Static files -----------------------------------------------------------
STATIC_URL = "static/"
STATIC_ROOT = env.path("DJANGO_STATIC_ROOT", default=BASE_DIR / "var" / "static")
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# --- Time and language ------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# Django 6's default: a URL typed without a scheme in a form means https.
FORMS_URLFIELD_ASSUME_HTTPS = True

# --- Sign-in (OpenID Connect) -----------------------------------------------
AUTHENTICATION_BACKENDS = ["tenants.auth.BerthOidcBackend"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"
OIDC_RP_CLIENT_ID = env.str("OIDC_RP_CLIENT_ID", default="berth-portal")
OIDC_RP_CLIENT_SECRET = secret("OIDC_RP_CLIENT_SECRET", debug_default="")
OIDC_RP_SIGN_ALGO = "RS256"
OIDC_RP_SCOPES = env.str("OIDC_RP_SCOPES", default="openid email profile groups offline_access")
OIDC_OP_ISSUER = env.str("OIDC_OP_ISSUER", default="")
OIDC_OP_AUTHORIZATION_ENDPOINT = env.str("OIDC_OP_AUTHORIZATION_ENDPOINT", default="")
OIDC_OP_TOKEN_ENDPOINT = env.str("OIDC_OP_TOKEN_ENDPOINT", default="")
OIDC_OP_USER_ENDPOINT = env.str("OIDC_OP_USER_ENDPOINT", default="")
OIDC_OP_JWKS_ENDPOINT = env.str("OIDC_OP_JWKS_ENDPOINT", default="")
OIDC_OP_LOGOUT_ENDPOINT = env.str("OIDC_OP_LOGOUT_ENDPOINT", default="")
OIDC_OP_LOGOUT_URL_METHOD = "tenants.auth.provider_logout_url"
# Access tokens sent to the API as Bearer must carry this audience: the API's own, never a client id, or an ID
# token issued to that client would pass (the system check berth.E001 refuses that).
OIDC_API_AUDIENCE = env.str("OIDC_API_AUDIENCE", default="berth-api")
# Clients whose access tokens are accepted even without the RFC 9068 "at+jwt" type (e.g. Keycloak's).
OIDC_API_CLIENTS = env.list("OIDC_API_CLIENTS", default=[])
OIDC_VERIFY_SSL = env.str("OIDC_CA_BUNDLE", default="") or True
OIDC_USE_PKCE = True
# Tokens stay out of the session table: secrets never sit in the database in plaintext.
OIDC_STORE_ID_TOKEN = False
OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS = env.int("OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS", default=900)
OIDC_AUTH_REQUEST_EXTRA_PARAMS = {"prompt": "login consent"} if env.bool("OIDC_FORCE_LOGIN", default=False) else {}
OIDC_CALLBACK_CLASS = "tenants.auth.AuditedCallbackView"
OIDC_AUTHENTICATE_CLASS = "mozilla_django_oidc.views.OIDCAuthenticationRequestView"
# URL names, or compiled patterns (a plain string is taken for a URL name and reversed).
OIDC_EXEMPT_URLS = ["login", "logout", re.compile(r"^/api/")]
# Groups claim values that make a platform role; teams come from groups with this prefix.
BERTH_ADMIN_GROUPS = env.list("BERTH_ADMIN_GROUPS", default=["berth-admins"])
BERTH_APPROVER_GROUPS = env.list("BERTH_APPROVER_GROUPS", default=["berth-approvers"])
BERTH_TEAM_GROUP_PREFIX = env.str("BERTH_TEAM_GROUP_PREFIX", default="team-")
# Failed sign-ins and refused credentials per source address and minute before it gets 429s, and how many
# audit rows such failures may write per minute in all (see tenants/services/auth_failures.py).
# Every this many minutes the provider is asked again (with the person's refresh token) who each user is and
# which groups they are in; API tokens of a user not confirmed within BERTH_IDENTITY_MAX_AGE_MINUTES are
# refused until a re-check or sign-in succeeds. Users the provider no longer knows are deactivated.
BERTH_IDENTITY_RECHECK_MINUTES = env.int("BERTH_IDENTITY_RECHECK_MINUTES", default=15)
BERTH_IDENTITY_MAX_AGE_MINUTES = env.int("BERTH_IDENTITY_MAX_AGE_MINUTES", default=60)
BERTH_AUTH_FAILURES_PER_MINUTE = env.int("BERTH_AUTH_FAILURES_PER_MINUTE", default=20)
BERTH_AUTH_FAILURE_ROWS_PER_MINUTE = env.int("BERTH_AUTH_FAILURE_ROWS_PER_MINUTE", default=100)

# --- Sessions and security headers ------------------------------------------
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_AGE = env.int("DJANGO_SESSION_COOKIE_AGE", default=8 * 3600)
# Session and CSRF cookies only over https (default: unless DEBUG). Off only for a portal served over plain http on
# loopback, as `make demo` does.
SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=not DEBUG)
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=not DEBUG)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = not DEBUG
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        # Sign-in and sign-out redirect to the provider after a form POST.
        "form-action": ["'self'"] + sorted({u for u in (OIDC_OP_ISSUER, OIDC_OP_LOGOUT_ENDPOINT) if u}),
        "frame-ancestors": ["'none'"],
        "base-uri": ["'self'"],
        "object-src": ["'none'"],
    }
}

# --- REST API ---------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.api.authentication.ApiTokenAuthentication",
        "tenants.api.authentication.OidcBearerAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "tenants.api.pagination.BerthPagination",
    "PAGE_SIZE": 50,  # at most tenants.api.pagination.MAX_LIMIT per page
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "tenants.api.negotiation.JsonWhateverAccepted",
    # JSON or a plain form; no multipart: nothing takes a file, and a malformed multipart body parses as empty.
    "DEFAULT_PARSER_CLASSES": ["tenants.api.parsers.BoundedJSONParser", "rest_framework.parsers.FormParser"],
    "DEFAULT_THROTTLE_RATES": {
        "writes": env.str("BERTH_WRITE_THROTTLE", default="120/min"),
        # Tenant metrics queries per person (tenants/api/prometheus.py): a dashboard of ten panels refreshing every
        # ten seconds asks 60 a minute.
        "prometheus": env.str("BERTH_PROMETHEUS_THROTTLE", default="300/min"),
        # Reads of a tenant's events and pod logs per person (pages and API): a live follow polls 20 a minute.
        "workload": env.str("BERTH_WORKLOAD_THROTTLE", default="60/min"),
    },
    "EXCEPTION_HANDLER": "tenants.api.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Berth API",
    "DESCRIPTION": "Self-service Kubernetes tenants: requests, approvals, tenants, kubeconfigs, audit.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Requests' actions keep their name; what POST /requests/ takes (no transfers: those are asked for on the
    # tenant) is its own enum.
    "ENUM_NAME_OVERRIDES": {
        "ActionEnum": "tenants.models.TenantRequest.Action",
        "DeliveryStatusEnum": "tenants.models.WebhookDelivery.Status",
        "RightsizingBasisEnum": "tenants.rightsizing.BASIS_CHOICES",
    },
    # Every error status each operation can answer, with its body, and links between operations.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "tenants.api.schema.add_errors_and_links",
    ],
}

# --- Celery -----------------------------------------------------------------
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="redis://127.0.0.1:6379/0")
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Enqueueing must not hang a web request when Redis is down: the sweep catches up.
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "max_retries": 1,
    "interval_start": 0,
    "interval_step": 0.2,
    "socket_timeout": 2,
    "socket_connect_timeout": 2,
}
# Queues by urgency; a worker started without -Q consumes every queue declared here. Provisioning and
# decommissioning have a queue of their own, so an approval never waits in line behind a reconcile pass or
# isolation checks ("reconcile"), nor behind a slow webhook receiver ("events"); a deployment gives each
# queue workers of its own (docker-compose.yml, deploy/helm/berth values `workers`).
# Task names are plain strings, as tenants.dispatch sends them (tests/portal/test_settings.py checks that they
# agree): the settings import nothing of the domain.
CELERY_TASK_QUEUES = [Queue(name, routing_key=name) for name in ("provision", "celery", "reconcile", "events")]
CELERY_TASK_ROUTES = {
    **dict.fromkeys(
        (
            "worker.tasks.provision_tenant",
            "worker.tasks.look_again",
            "worker.tasks.decommission_tenant",
            "worker.tasks.apply_sleep",
        ),
        {"queue": "provision"},
    ),
    **dict.fromkeys(
        (
            "worker.tasks.reconcile",
            "worker.tasks.reconcile_cluster",
            "worker.tasks.repair_tenant",
            "worker.tasks.check_isolation",
            "worker.tasks.refresh_usage",
        ),
        {"queue": "reconcile"},
    ),
    "worker.events.*": {"queue": "events"},
}
# The watcher (manage.py berth_watch, worker/watcher.py) notices drift as it happens; with it deployed the periodic
# pass is a slow safety net (every 6 hours unless BERTH_RECONCILE_SECONDS says otherwise), without it every 5 min.
BERTH_WATCHER = env.bool("BERTH_WATCHER", default=False)
BERTH_RECONCILE_SECONDS = env.float("BERTH_RECONCILE_SECONDS", default=6 * 3600.0 if BERTH_WATCHER else 300.0)
# A tenant's drift events within this window become one repair job.
BERTH_WATCH_COALESCE_SECONDS = env.float("BERTH_WATCH_COALESCE_SECONDS", default=1.0)
# The server ends each watch after this long (it is resumed at once from its last resourceVersion).
BERTH_WATCH_TIMEOUT_SECONDS = env.int("BERTH_WATCH_TIMEOUT_SECONDS", default=300)
# How often the watcher checks every ready tenant against what it holds in memory (no API request): what a tier or
# setting change renders differently is found although nothing changed on the cluster.
BERTH_WATCH_RESYNC_SECONDS = env.float("BERTH_WATCH_RESYNC_SECONDS", default=3600.0)
# How often a standby asks for the leader's lock, and the leader checks it still holds it.
BERTH_WATCH_LEADER_POLL_SECONDS = env.float("BERTH_WATCH_LEADER_POLL_SECONDS", default=2.0)
# A file the watcher touches every 10 s while every cluster's loop goes round (worker.watcher.keep_heartbeat), for a
# liveness probe to restart a hung leader, whose lock would otherwise stay held; "" = off.
BERTH_WATCHER_HEARTBEAT_FILE = env.str("BERTH_WATCHER_HEARTBEAT_FILE", default="")
# The watcher's metrics exporter (events, repairs enqueued, relists, bookmark age): a port, 0 = off.
BERTH_WATCHER_METRICS_PORT = env.int("BERTH_WATCHER_METRICS_PORT", default=0)
BERTH_WATCHER_METRICS_ADDRESS = env.str("BERTH_WATCHER_METRICS_ADDRESS", default="0.0.0.0")
CELERY_BEAT_SCHEDULE = {
    "sweep": {"task": "worker.tasks.sweep", "schedule": env.float("BERTH_SWEEP_SECONDS", default=60.0)},
    "reconcile": {"task": "worker.tasks.reconcile", "schedule": BERTH_RECONCILE_SECONDS},
    "recheck-identities": {"task": "worker.tasks.recheck_identities", "schedule": 60.0},
    "sweep-webhooks": {"task": "worker.events.sweep_webhooks", "schedule": 60.0},
}
# With the watcher, its leader takes a quota reading of every ready tenant from its index this often (no API request;
# the measured part by the cluster's Prometheus) for the usage history and the idle clock; the pass then takes none.
BERTH_USAGE_SECONDS = env.float("BERTH_USAGE_SECONDS", default=300.0)
# A quota reading goes into the usage history covering the time since the tenant's previous one, at most this
# long: a longer silence (workers down) is unknown time, not usage (tenants.services.usage). Default: two readings'
# intervals (the watcher's, else the pass's).
BERTH_USAGE_MAX_GAP_SECONDS = env.float(
    "BERTH_USAGE_MAX_GAP_SECONDS", default=2 * (BERTH_USAGE_SECONDS if BERTH_WATCHER else BERTH_RECONCILE_SECONDS)
)
# Showback (tenants.costs): the currency cluster prices are set in unless an admin names another.
BERTH_CURRENCY = env.str("BERTH_CURRENCY", default="EUR")
# Right-sizing (tenants/rightsizing.py, docs/rightsizing.md): over the last BERTH_RIGHTSIZE_DAYS complete days on
# its tier, a tenant whose CPU, memory and storage all averaged under UNDER_SHARE of the quota (with readings
# covering at least MIN_COVERAGE of the window) is offered the smallest tier holding its peaks × HEADROOM; one
# whose peak reached NEAR_SHARE of a quota on NEAR_DAYS days or more is offered the next tier up.
BERTH_RIGHTSIZE_DAYS = env.int("BERTH_RIGHTSIZE_DAYS", default=14)
BERTH_RIGHTSIZE_UNDER_SHARE = env.float("BERTH_RIGHTSIZE_UNDER_SHARE", default=0.3)
BERTH_RIGHTSIZE_MIN_COVERAGE = env.float("BERTH_RIGHTSIZE_MIN_COVERAGE", default=0.8)
BERTH_RIGHTSIZE_NEAR_SHARE = env.float("BERTH_RIGHTSIZE_NEAR_SHARE", default=0.9)
BERTH_RIGHTSIZE_NEAR_DAYS = env.int("BERTH_RIGHTSIZE_NEAR_DAYS", default=2)
BERTH_RIGHTSIZE_HEADROOM = env.float("BERTH_RIGHTSIZE_HEADROOM", default=1.25)
# Approved or working tenants untouched for this long are re-sent by the sweep.
BERTH_STUCK_AFTER_SECONDS = env.int("BERTH_STUCK_AFTER_SECONDS", default=90)
# While the provision queue holds messages (workers behind: the tenants wait in it, not lost) the sweep re-sends a
# tenant only when its status and its last re-send are this much older instead (read as at least the above), so
# that thousands approved at once do not fill the queue with a duplicate each per sweep; a job lost meanwhile is
# re-sent within this long (or within BERTH_STUCK_AFTER_SECONDS of the queue emptying, if sooner).
BERTH_STUCK_BACKLOG_SECONDS = env.int("BERTH_STUCK_BACKLOG_SECONDS", default=3600)
# A tenant not ready (or not deleted) this long after provisioning (or decommissioning) started is marked
# failed with the reason; until then the worker looks again every few seconds, never waiting in between.
BERTH_PROVISION_TIMEOUT_SECONDS = env.int("BERTH_PROVISION_TIMEOUT_SECONDS", default=900)

# --- Cache -----------------------------------------------------------------
# Shared by every web and worker process (throttles and sign-in failure counts must hold across gunicorn
# workers), so Redis: CACHE_URL, by default database 1 of the broker's Redis. A per-process "locmemcache://"
# suits single-process experiments only.
CACHE_URL = env.str("CACHE_URL", default=urlsplit(CELERY_BROKER_URL)._replace(path="/1").geturl())


def cache_config(url: str) -> dict[str, Any]:
    """Redis read as an empty cache while it is away (portal/cache.py: the cache holds counters only), asked
    with short timeouts so that an unreachable Redis does not hold a request."""
    if url.startswith(("redis://", "rediss://", "unix://")):
        return {
            "BACKEND": "portal.cache.ForgivingRedisCache",
            "LOCATION": url,
            "KEY_PREFIX": "berth",
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    return env.cache_url_config(url)


CACHES = {"default": cache_config(CACHE_URL)}

# --- Email ------------------------------------------------------------------
EMAIL_CONFIG = env.email_url("EMAIL_URL", default="consolemail://" if DEBUG else "smtp://127.0.0.1:25")
vars().update(EMAIL_CONFIG)
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="Berth <berth@localhost>")

# --- Product ----------------------------------------------------------------
BERTH_RESERVED_NAMES = env.list(
    "BERTH_RESERVED_NAMES",
    default=["default", "berth", "berth-system", "berth-canary", "monitoring", "ingress-nginx", "cert-manager"],
)
BERTH_EXPIRY_REMINDER_DAYS = env.int("BERTH_EXPIRY_REMINDER_DAYS", default=7)
# The helm executable the worker runs for vcluster tenants installed with helm: a name found on PATH, or a path.
BERTH_HELM_BINARY = env.str("BERTH_HELM_BINARY", default="helm")

# --- Cluster access ---------------------------------------------------------
# With a least-privilege credential (the Helm chart's ServiceAccounts, docs/security.md) Berth holds its rights
# inside tenant namespaces only: the worker writes a RoleBinding per entry into every namespace it creates.
# "ClusterRole=namespace/serviceaccount", comma-separated. Empty (the default) for a cluster-admin credential.
BERTH_NAMESPACE_GRANTS = env.list("BERTH_NAMESPACE_GRANTS", default=[])
# The image of the isolation report's probe pods (worker/netprobe.py): it must hold busybox's sh, nc, httpd and
# nslookup and run as a non-root user. The default is the one the dev nodes build (devcluster/images.py).
BERTH_ISOLATION_PROBE_IMAGE = env.str("BERTH_ISOLATION_PROBE_IMAGE", default="berth.local/busybox:1")

# --- Webhooks ---------------------------------------------------------------
# Platform admins register endpoints in the admin, team owners their team's on the team page and the API
# (docs/webhooks.md); a team's owners may have at most BERTH_TEAM_WEBHOOK_LIMIT of them. One attempt may take
# this long in all (connect, TLS, request, answer); a failed one is retried after BERTH_WEBHOOK_RETRY_SECONDS,
# doubling up to BERTH_WEBHOOK_RETRY_MAX_SECONDS, BERTH_WEBHOOK_MAX_ATTEMPTS times in all; at most
# BERTH_WEBHOOK_MAX_IN_FLIGHT attempts run at once across every worker, and at most
# BERTH_WEBHOOK_MAX_IN_FLIGHT_PER_TEAM of them for one team's endpoints (a team's slow receivers never hold up
# another team's events). An endpoint whose last BERTH_WEBHOOK_DISABLE_AFTER_FAILURES deliveries were all given
# up is turned off (0: never).
BERTH_WEBHOOK_TIMEOUT_SECONDS = env.float("BERTH_WEBHOOK_TIMEOUT_SECONDS", default=15.0)
BERTH_WEBHOOK_RETRY_SECONDS = env.float("BERTH_WEBHOOK_RETRY_SECONDS", default=5.0)
BERTH_WEBHOOK_RETRY_MAX_SECONDS = env.float("BERTH_WEBHOOK_RETRY_MAX_SECONDS", default=3600.0)
BERTH_WEBHOOK_MAX_ATTEMPTS = env.int("BERTH_WEBHOOK_MAX_ATTEMPTS", default=12)
BERTH_WEBHOOK_MAX_IN_FLIGHT = env.int("BERTH_WEBHOOK_MAX_IN_FLIGHT", default=4)
BERTH_WEBHOOK_MAX_IN_FLIGHT_PER_TEAM = env.int("BERTH_WEBHOOK_MAX_IN_FLIGHT_PER_TEAM", default=1)
BERTH_WEBHOOK_DISABLE_AFTER_FAILURES = env.int("BERTH_WEBHOOK_DISABLE_AFTER_FAILURES", default=5)
# Networks webhooks may always reach, whatever the address checks say (CIDRs, comma-separated): the operator's
# explicit choice, e.g. an internal relay. Empty: public addresses only, and private ones per endpoint.
BERTH_WEBHOOK_ALLOWED_NETWORKS = env.list("BERTH_WEBHOOK_ALLOWED_NETWORKS", default=[])
# CA bundle for https receivers (empty: the system trust store).
BERTH_WEBHOOK_CA_BUNDLE = env.str("BERTH_WEBHOOK_CA_BUNDLE", default="")
# Delivered and given-up deliveries are kept this many days in the delivery log.
BERTH_WEBHOOK_LOG_DAYS = env.int("BERTH_WEBHOOK_LOG_DAYS", default=30)
BERTH_TEAM_WEBHOOK_LIMIT = env.int("BERTH_TEAM_WEBHOOK_LIMIT", default=10)

# --- Metrics ----------------------------------------------------------------
# GET /metrics on the web port answers Prometheus with this bearer token; unset (the default), /metrics is 404.
BERTH_METRICS_TOKEN = secret("BERTH_METRICS_TOKEN", required=False)
# Alertmanager posts tenant alerts to POST /hooks/alertmanager/ with this bearer token (docs/monitoring.md);
# unset (the default), the receiver is 404.
BERTH_ALERTMANAGER_TOKEN = secret("BERTH_ALERTMANAGER_TOKEN", required=False)
# A firing alert Alertmanager has not posted again for this long (it repeats every repeat_interval, 4h in the
# documented route, while it fires) is resolved as expired by the sweep: its resolution was lost. A few repeats.
BERTH_ALERT_EXPIRE_HOURS = env.float("BERTH_ALERT_EXPIRE_HOURS", default=13.0)
# Resolved alerts are kept this many days (the tenant page, the API and the admin show them).
BERTH_ALERT_LOG_DAYS = env.int("BERTH_ALERT_LOG_DAYS", default=90)
# The Celery worker's own exporter (its tasks' counters and histograms): a port of the worker's main process,
# 0 = off. Prefork children share their numbers through PROMETHEUS_MULTIPROC_DIR, which it then requires.
BERTH_WORKER_METRICS_PORT = env.int("BERTH_WORKER_METRICS_PORT", default=0)
BERTH_WORKER_METRICS_ADDRESS = env.str("BERTH_WORKER_METRICS_ADDRESS", default="0.0.0.0")

# Each Prometheus a cluster may name (Cluster.prometheus), by name (tenants/prometheus.py, docs/monitoring.md). An
# entry is either the address of the prom-label-proxy in front of it (-label namespace -header-name
# X-Berth-Namespace -enable-label-apis), for tenants' own metrics, e.g. {"dev": "http://127.0.0.1:9091"}; or an
# object with that address as "label_proxy" and/or the Prometheus itself as "url", e.g. {"dev": {"label_proxy":
# "http://127.0.0.1:9091", "url": "http://prometheus:9090"}}. The worker reads measured CPU and memory of every
# namespace from "url" (worker/measured_usage.py); the web never sends a tenant's query there. Empty: no cluster
# has tenant metrics or measured usage.
BERTH_PROMETHEUS = env.json("BERTH_PROMETHEUS", default={})
# Seconds the worker waits for each of its two measured-usage queries to one Prometheus (a reconcile pass).
BERTH_MEASURED_USAGE_TIMEOUT = env.float("BERTH_MEASURED_USAGE_TIMEOUT", default=5.0)
# The kubelet's scrape job (a regular expression of job names) and its two endpoints (the series' metrics_path
# label): measured usage believes a namespace label only of these series (tenants/metric_sources.py; the chart
# sets them from monitoring.sources, as it renders the alert rules).
BERTH_KUBELET_JOB = env.str("BERTH_KUBELET_JOB", default="kubelet")
BERTH_KUBELET_CADVISOR_PATH = env.str("BERTH_KUBELET_CADVISOR_PATH", default="/metrics/cadvisor")
BERTH_KUBELET_RESOURCE_PATH = env.str("BERTH_KUBELET_RESOURCE_PATH", default="/metrics/resource")
# Slow reads one person may have running at once, per kind (metrics queries; events and logs): more get 429 at
# once, so a few slow requests cannot hold every web worker (tenants/concurrency.py).
BERTH_READS_AT_ONCE = env.int("BERTH_READS_AT_ONCE", default=4)
_PROMETHEUS_ENTRY_KEYS = ("label_proxy", "url")


def _is_address(value: object) -> bool:
    return isinstance(value, str) and value.startswith(("http://", "https://"))


def _is_prometheus_entry(value: object) -> bool:
    if _is_address(value):
        return True
    return (
        isinstance(value, dict)
        and bool(value)
        and set(value) <= set(_PROMETHEUS_ENTRY_KEYS)
        and all(_is_address(v) for v in value.values())
    )


if not isinstance(BERTH_PROMETHEUS, dict) or not all(
    isinstance(k, str) and _is_prometheus_entry(v) for k, v in BERTH_PROMETHEUS.items()
):
    raise ImproperlyConfigured(
        "BERTH_PROMETHEUS must map names to http(s) addresses of label proxies, or to objects with "
        '"label_proxy" and/or "url" addresses, e.g. {"dev": {"label_proxy": "http://…", "url": "http://…"}}'
    )
if not all(
    value and '"' not in value and "\\" not in value
    for value in (BERTH_KUBELET_JOB, BERTH_KUBELET_CADVISOR_PATH, BERTH_KUBELET_RESOURCE_PATH)
):
    raise ImproperlyConfigured("BERTH_KUBELET_JOB and BERTH_KUBELET_*_PATH must be set, without quotes or backslashes")
if BERTH_ALERT_EXPIRE_HOURS <= 0 or BERTH_ALERT_LOG_DAYS < 1:
    raise ImproperlyConfigured("BERTH_ALERT_EXPIRE_HOURS must be positive and BERTH_ALERT_LOG_DAYS at least 1")
if BERTH_MEASURED_USAGE_TIMEOUT <= 0:
    raise ImproperlyConfigured("BERTH_MEASURED_USAGE_TIMEOUT must be a positive number of seconds")
if BERTH_USAGE_SECONDS <= 0:
    raise ImproperlyConfigured("BERTH_USAGE_SECONDS must be a positive number of seconds")

# --- Logging ----------------------------------------------------------------
# One JSON object per line (tenants/logs.py) with request_id, user and tenant_id, in the web and the worker alike;
# credentials are redacted by a filter on the handler. LOG_FORMAT=text gives a readable line for development.
LOG_FORMAT = env.str("LOG_FORMAT", default="text" if DEBUG else "json")
if LOG_FORMAT not in ("json", "text"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be json or text, not {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "redact": {"()": "tenants.logs.RedactFilter"},
        "context": {"()": "tenants.logs.ContextFilter"},
    },
    "formatters": {
        "json": {"()": "tenants.logs.JsonFormatter"},
        "text": {"()": "tenants.logs.TextFormatter"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["redact", "context"]}
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        "kubernetes": {"level": "WARNING"},
        "urllib3": {"level": "WARNING"},
        # The dev server's access log (runserver): through the redacting handler, not Django's own, which writes
        # the request line as it came (an authorization code in /oidc/callback/?code=... among it).
        "django.server": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
# The worker logs through this configuration too (Celery would otherwise put its own handler on the root logger).
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
