"""The portal's URLs and one that fails: how the 500 page is reached in tests/browser/test_error_pages.py."""

from django.http import HttpRequest, HttpResponse
from django.urls import path

from portal.urls import handler400, handler404, handler500
from portal.urls import urlpatterns as portal_urlpatterns

__all__ = ["handler400", "handler404", "handler500", "urlpatterns"]


def fail(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a deliberate failure for the 500 page")


urlpatterns = [path("test-failure/", fail), *portal_urlpatterns]
