#!/bin/sh
# Create the compose secrets from deploy/secrets/*.example, once (existing files are kept).
#
#   django_secret_key      a fresh random key (the example is only a placeholder)
#   berth_secrets_key      a fresh random key: seals the provider refresh tokens Berth keeps
#   postgres_password      a fresh random password (read by both PostgreSQL and the portal)
#   oidc_rp_client_secret  copied: it must equal the berth-portal client secret in
#                          deploy/keycloak/berth-realm.json
#
# The files are made readable by the container users (postgres: uid 999, berth: uid 10001),
# because compose (without swarm) bind-mounts secret files as they are on the host.
set -eu
cd "$(dirname "$0")/secrets"

random() { head -c 64 /dev/urandom | base64 | tr -d '\n/+='; }

for example in *.example; do
    name="${example%.example}"
    if [ -e "$name" ]; then
        echo "keep    deploy/secrets/$name"
        continue
    fi
    case "$name" in
        django_secret_key|berth_secrets_key|postgres_password) random > "$name" ;;
        *) cp "$example" "$name" ;;
    esac
    chmod 0644 "$name"
    echo "created deploy/secrets/$name"
done
