"""The API's JSON parser: DRF's, refusing documents nested deeper than any of the API's bodies.

DRF reads a JSON body through ``request.body``, which Django bounds by DATA_UPLOAD_MAX_MEMORY_SIZE (a larger
body is a 400 before it is read: ``tenants.api.errors.bad_request``), so the size is bounded already; the
nesting is not. Python's decoder recurses once per level and stops with RecursionError near the interpreter's
limit, which DRF lets through as a 500, and a document only just under that limit would fail again wherever
the data is walked recursively later. Every body the API takes nests two or three levels (a sleep schedule's
``nights``), so this refuses anything deeper than MAX_DEPTH with a 400.
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_DEPTH = 20
TOO_DEEP = f"JSON parse error - nested deeper than {MAX_DEPTH} levels"


class BoundedJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(TOO_DEEP) from None
        if deeper_than(data, MAX_DEPTH):
            raise ParseError(TOO_DEEP)
        return data


def deeper_than(data: Any, limit: int) -> bool:
    """Whether lists and objects in ``data`` nest more than ``limit`` levels (walked without recursion)."""
    pending = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict):
            children = list(value.values())
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in children)
    return False
