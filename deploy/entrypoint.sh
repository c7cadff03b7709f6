#!/bin/sh
# Entrypoint of the Berth image: turn mounted secret files into what libraries read, then run the command.
#
# Django reads its own secrets as NAME_FILE (DJANGO_SECRET_KEY_FILE, OIDC_RP_CLIENT_SECRET_FILE).
# The database password is the exception: DATABASE_URL has no _FILE form, so the password stays out
# of the URL and libpq (psycopg) takes it from PGPASSWORD, filled here from PGPASSWORD_FILE.
# Nothing is written to disk and nothing is printed.
set -eu

if [ -n "${PGPASSWORD_FILE:-}" ] && [ -z "${PGPASSWORD:-}" ]; then
    if [ ! -r "$PGPASSWORD_FILE" ]; then
        echo "entrypoint: PGPASSWORD_FILE=$PGPASSWORD_FILE is not readable by uid $(id -u)" >&2
        exit 78  # EX_CONFIG
    fi
    PGPASSWORD="$(cat "$PGPASSWORD_FILE")"
    export PGPASSWORD
fi

exec "$@"
