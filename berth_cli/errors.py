"""Exit codes scripts can test, and the one error type that carries them to the top."""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    """The process exit codes; README's CLI section documents them and tests assert them."""

    OK = 0
    ERROR = 1  # network, server error, an answer the CLI does not understand
    USAGE = 2  # bad options or arguments (Click's own code)
    AUTH = 3  # not signed in, or the credentials were refused (401)
    FORBIDDEN = 4  # signed in, but not allowed (403)
    NOT_FOUND = 5  # no such tenant or request, or not yours (404)
    INVALID = 6  # refused input: a field error from the API (400) or an invalid tenants file
    CONFLICT = 7  # the move is no longer possible (409), e.g. the request was already decided
    FAILED = 8  # --wait: the tenant failed, or the request was rejected or cancelled
    TIMEOUT = 9  # --wait: not done within --timeout
    CHANGES = 10  # berth diff: the plan has changes


class CliError(Exception):
    """A failure to report on stderr with its exit code; ``details`` are extra lines (e.g. field errors)."""

    def __init__(self, message: str, code: Exit = Exit.ERROR, details: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.details = details or []
