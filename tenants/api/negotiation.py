"""Content negotiation that never refuses: the API answers in JSON whatever the client says it accepts.

Views whose success is a file (a kubeconfig in YAML, the audit export in CSV) return it themselves; DRF's
own negotiation would refuse ``Accept: application/yaml`` with 406 before such a view runs, since only
its JSON renderer is listed. Errors are JSON, as the schema documents them, whatever the Accept header.
"""

from __future__ import annotations

from django.http import Http404
from rest_framework import exceptions
from rest_framework.negotiation import DefaultContentNegotiation


class JsonWhateverAccepted(DefaultContentNegotiation):
    def select_renderer(self, request, renderers, format_suffix=None):
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except (exceptions.NotAcceptable, Http404):  # Http404: a ?format= no renderer has
            return renderers[0], renderers[0].media_type
