"""The API documentation: Swagger UI from its own static files, under the portal's Content-Security-Policy.

drf-spectacular's view writes its start-up script and a style block inline, which the CSP (script-src and
style-src 'self') rightly blocks, leaving a blank page. Here the page names the schema in a data attribute and
a static script (static/js/api-docs.js) starts Swagger UI from drf-spectacular-sidecar's copy of it.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse


def api_docs(request: HttpRequest) -> HttpResponse:
    return render(request, "pages/api_docs.html", {"schema_url": reverse("api-schema")})
