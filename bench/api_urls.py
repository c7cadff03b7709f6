"""The portal's URLs plus ``/bench/bare/``: a DRF endpoint with the API's authentication and nothing else.

Its rate is the baseline of bench/api_load.py: what the stack (gunicorn, middleware, DRF, the token lookup)
costs before any query or serializer of Berth's own.
"""

from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.urls import urlpatterns as portal_urlpatterns


class BareView(APIView):
    def get(self, request: Request) -> Response:
        return Response({"ok": True})


urlpatterns = [path("bench/bare/", BareView.as_view()), *portal_urlpatterns]
