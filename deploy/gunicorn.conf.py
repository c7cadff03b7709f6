"""Gunicorn settings for the Berth portal image (``gunicorn -c deploy/gunicorn.conf.py``).

Every value can be changed through the environment, so the compose file and a
Kubernetes Deployment use the same image and the same file.
"""

import gc
import multiprocessing
import os


def _int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


def _bool(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value not in {"true", "false", "1", "0", "yes", "no"}:
        raise ValueError(f"{name} must be true or false, not {value!r}")
    return value in {"true", "1", "yes"}


wsgi_app = "portal.wsgi:application"
bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")

# Sync workers: the portal is request/response with short database transactions.
# WEB_CONCURRENCY is what most platforms set; GUNICORN_WORKERS wins if both are set.
workers = _int("GUNICORN_WORKERS", _int("WEB_CONCURRENCY", min(2 * multiprocessing.cpu_count() + 1, 8)))
threads = _int("GUNICORN_THREADS", 1)
timeout = _int("GUNICORN_TIMEOUT", 60)
graceful_timeout = _int("GUNICORN_GRACEFUL_TIMEOUT", 30)
keepalive = _int("GUNICORN_KEEPALIVE", 5)
# Recycle workers now and then so a slow leak cannot grow without bound. Workers start together, so the jitter
# must be wide to stagger their recycling: with a tenth of max_requests (200, the earlier default) all five
# recycled within a few seconds of each other, about a second of CPU each, and did so again every cycle
# (bench/api_load.py saw them in bursts of five); with half, each cycle spreads them further apart.
max_requests = _int("GUNICORN_MAX_REQUESTS", 2000)
max_requests_jitter = _int("GUNICORN_MAX_REQUESTS_JITTER", max_requests // 2)
# Load the portal once, in the parent, and fork workers from it. Each worker used to import Django, the portal and
# its views itself: about 1.1 s of CPU per boot on a 2-core machine, which with recycling above came to about
# 0.4 ms a request, nearly a tenth of the bare API's (bench/api_load.py), and landed as a stall on whichever second
# it fell. Forked from the loaded portal, a worker's boot costs 0.14-0.19 s (its connection and first requests).
# The parent opens no database or cache connection and starts no thread while loading (tests/deploy/
# test_gunicorn.py); a new release means a new pod (HUP reloads the configuration, not the code).
preload_app = _bool("GUNICORN_PRELOAD", True)

# Heartbeat files on tmpfs: a disk-backed /tmp can stall workers (docs: "blocking os.fchmod").
worker_tmp_dir = os.environ.get("GUNICORN_WORKER_TMP_DIR", "/dev/shm" if os.path.isdir("/dev/shm") else None)
# No runtime control socket: the image runs read-only as a non-root user.
control_socket_disable = True

# Logs go to the container's stdout/stderr.
accesslog = "-"
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")
# %({x-forwarded-for}i)s: the client as the reverse proxy saw it; %(M)s: duration in ms; the request id the
# portal answered with (X-Request-ID), the key to the portal's own log lines of that request.
access_log_format = (
    '%(h)s %({x-forwarded-for}i)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" %(M)sms '
    "request_id=%({x-request-id}o)s"
)
# gunicorn's own lines in the portal's format (tenants/logs.py: JSON unless LOG_FORMAT=text), redacted like the rest.
_formatter = "TextFormatter" if os.environ.get("LOG_FORMAT") == "text" else "JsonFormatter"
logconfig_dict = {
    "formatters": {"berth": {"()": f"tenants.logs.{_formatter}"}},
    "filters": {"redact": {"()": "tenants.logs.RedactFilter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "berth", "filters": ["redact"]},
        "access": {
            "class": "logging.StreamHandler",
            "formatter": "berth",
            "filters": ["redact"],
            "stream": "ext://sys.stdout",
        },
    },
    "root": {"level": "INFO", "handlers": ["console"]},
    "loggers": {
        "gunicorn.error": {"level": loglevel.upper(), "handlers": ["console"], "propagate": False},
        "gunicorn.access": {"level": "INFO", "handlers": ["access"], "propagate": False},
    },
}

# Which peers may set X-Forwarded-Proto (and so make a request count as HTTPS).
# Set this to the reverse proxy's address or network, e.g. "10.0.0.0/8"; "*" only when
# nothing but the proxy can reach port 8000. Django trusts X-Forwarded-Proto as well
# (SECURE_PROXY_SSL_HEADER), so the proxy must always overwrite that header.
forwarded_allow_ips = os.environ.get(
    "GUNICORN_FORWARDED_ALLOW_IPS", os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1,::1")
)


def pre_fork(server, worker):
    # What the parent has loaded stays shared with the workers it forks: objects frozen out of the collector's
    # reach are not written to by a worker's collections (which would copy their pages), nor walked by them.
    gc.freeze()


# prometheus_client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR): /metrics adds up every worker's counters.
def on_starting(server):
    from portal import metrics_dir

    metrics_dir.clear()


def child_exit(server, worker):
    from portal import metrics_dir

    metrics_dir.process_exited(worker.pid)
