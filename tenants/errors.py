"""Domain errors the API and pages turn into 4xx answers, and what says the database is away.

Field-level problems are Django's ``ValidationError`` with a dict of messages.
"""

from django.db import InterfaceError, OperationalError

# SQLSTATEs of a lost or refused connection: class 08 (connection exception), and 57P01-57P03 (the server is
# shutting down, crashed, or cannot take connections yet); psycopg gives none when it could not connect at all.
_CONNECTION_STATES = ("08", "57P01", "57P02", "57P03")


def database_unavailable(exc: BaseException | None) -> bool:
    """Whether ``exc`` says the database is away (restarting, failing over, unreachable): the portal answers 503
    and a worker's job is retried. Not a query's own error (a constraint, a statement timeout)."""
    if isinstance(exc, InterfaceError):  # a connection already closed under us
        return True
    if not isinstance(exc, OperationalError):
        return False
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    return sqlstate is None or sqlstate.startswith(_CONNECTION_STATES)


class BerthError(Exception):
    """Base for errors a service raises on purpose."""


class Forbidden(BerthError):
    """The actor can see the object but may not do this to it (403)."""


class InvalidTransition(BerthError):
    """The object is no longer in a state that allows this (409)."""


class NoLongerExists(BerthError):
    """The object the caller read was removed before the change could lock it (404, as if never there)."""


class IdempotencyConflict(InvalidTransition):
    """An idempotency key came back with a different request than the one it first named (409)."""


class ClusterUnavailable(BerthError):
    """The tenant's cluster cannot be reached or refused the portal right now (503)."""


class ClusterRefused(BerthError):
    """The API server refused the team's own identity (no such pod: 404; not allowed: 403), with its message."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status


class Busy(BerthError):
    """The person already has as many slow reads running as allowed (429; tenants.concurrency)."""


class SignInRequired(BerthError):
    """The credential in hand comes from before the provider ended the person's session: sign in again (401)."""
