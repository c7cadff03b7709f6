# syntax=docker/dockerfile:1
#
# Berth portal images (docs/deployment.md).
#
#   docker build -t berth-portal .                     # target "web" (the last stage): gunicorn;
#                                                      # also runs `migrate` and `celery beat`
#   docker build --target worker -t berth-worker .     # the same plus kubectl and helm
#
# Both run as the unprivileged user "berth" (uid/gid 10001) from a root-owned, read-only /app.
# Nothing secret is baked in: collectstatic runs with throwaway values set for that one command.

# Pinned tools of the worker image. A new version needs its new checksums below (the
# published `.sha256` files next to the downloads: dl.k8s.io and get.helm.sh).
ARG KUBECTL_VERSION=v1.34.1
ARG KUBECTL_SHA256_AMD64=7721f265e18709862655affba5343e85e1980639395d5754473dafaadcaa69e3
ARG KUBECTL_SHA256_ARM64=420e6110e3ba7ee5a3927b5af868d18df17aae36b720529ffa4e9e945aa95450
ARG HELM_VERSION=v3.19.0
ARG HELM_SHA256_AMD64=a7f81ce08007091b86d8bd696eb4d86b8d0f2e1b9f6c714be62f82f96a594496
ARG HELM_SHA256_ARM64=440cf7add0aee27ebc93fada965523c1dc2e0ab340d4348da2215737fc0d76ad

# --- build: a virtualenv with the runtime dependencies only (no test extras) -------------------
FROM python:3.11.13-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml constraints.txt ./
# [project].dependencies, resolved against the exact versions in constraints.txt. Wheels only:
# every pinned package has one, so the image needs no compiler.
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > requirements.txt \
 && python -m venv /opt/venv \
 && /opt/venv/bin/pip install --only-binary=:all: -c constraints.txt -r requirements.txt \
 && /opt/venv/bin/pip check

# --- tools: kubectl and helm, each verified against a pinned SHA-256 ----------------------------
FROM python:3.11.13-slim-bookworm AS tools
ARG TARGETARCH
ARG KUBECTL_VERSION
ARG KUBECTL_SHA256_AMD64
ARG KUBECTL_SHA256_ARM64
ARG HELM_VERSION
ARG HELM_SHA256_AMD64
ARG HELM_SHA256_ARM64
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /tools
RUN arch="${TARGETARCH:-$(dpkg --print-architecture)}"; \
    case "$arch" in \
      amd64) kubectl_sha256="$KUBECTL_SHA256_AMD64"; helm_sha256="$HELM_SHA256_AMD64" ;; \
      arm64) kubectl_sha256="$KUBECTL_SHA256_ARM64"; helm_sha256="$HELM_SHA256_ARM64" ;; \
      *) echo "no pinned checksums for architecture $arch" >&2; exit 1 ;; \
    esac; \
    curl -fsSLo kubectl "https://dl.k8s.io/release/${KUBECTL_VERSION}/bin/linux/${arch}/kubectl" \
 && echo "${kubectl_sha256}  kubectl" | sha256sum --check --strict - \
 && curl -fsSLo helm.tar.gz "https://get.helm.sh/helm-${HELM_VERSION}-linux-${arch}.tar.gz" \
 && echo "${helm_sha256}  helm.tar.gz" | sha256sum --check --strict - \
 && tar -xzf helm.tar.gz --strip-components=1 "linux-${arch}/helm" \
 && install -m 0755 kubectl helm /usr/local/bin/ \
 && kubectl version --client=true \
 && helm version --short

# --- runtime: what the web, migrate, beat and worker containers share -------------------------
FROM python:3.11.13-slim-bookworm AS runtime
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=portal.settings \
    DJANGO_STATIC_ROOT=/app/var/static
RUN groupadd --system --gid 10001 berth \
 && useradd --system --uid 10001 --gid berth --home-dir /var/lib/berth --create-home --shell /usr/sbin/nologin berth \
 && install -d -o berth -g berth -m 0750 /var/lib/berth/beat
COPY --from=build /opt/venv /opt/venv
WORKDIR /app
# .dockerignore keeps out .env, secrets, kubeconfigs, tests, caches and the dev toolchain.
COPY . .
# Static files are collected (hashed and compressed for WhiteNoise) at build time. The secrets
# below exist only for this one command: they are not in ENV and not in any later layer.
RUN chmod 0755 deploy/entrypoint.sh \
 && DJANGO_DEBUG=false \
    DJANGO_SECRET_KEY=build-time-only-not-a-real-secret-0123456789abcdefghijklmnopqrstuvwxyz \
    OIDC_RP_CLIENT_SECRET=build-time-only \
    python manage.py collectstatic --noinput --verbosity 1 \
 && python -m compileall -q /app
USER berth:berth
EXPOSE 8000
ENTRYPOINT ["/app/deploy/entrypoint.sh"]
CMD ["gunicorn", "--config", "/app/deploy/gunicorn.conf.py"]

# --- worker: the runtime plus kubectl and helm -----------------------------------------------
FROM runtime AS worker
COPY --from=tools /usr/local/bin/kubectl /usr/local/bin/helm /usr/local/bin/
# Caches on /tmp: the file system is read-only for the berth user (and in compose, for everyone).
ENV HELM_CACHE_HOME=/tmp/helm/cache \
    HELM_CONFIG_HOME=/tmp/helm/config \
    HELM_DATA_HOME=/tmp/helm/data \
    KUBECACHEDIR=/tmp/kube-cache
CMD ["celery", "--app", "portal", "worker", "--loglevel", "INFO"]

# --- web (default target): gunicorn on :8000 -------------------------------------------------
FROM runtime AS web
# Django answers /healthz without the database; the Host header must be in DJANGO_ALLOWED_HOSTS
# (the compose file allows localhost) and the path is exempt from SECURE_SSL_REDIRECT.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; r = urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:8000/healthz', headers={'Host': 'localhost'}), timeout=4); sys.exit(0 if r.status == 200 else 1)"]
CMD ["gunicorn", "--config", "/app/deploy/gunicorn.conf.py"]
