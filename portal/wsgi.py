import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
application = get_wsgi_application()

# The URL configuration, and with it every view, now rather than on the first request: under gunicorn's
# preload_app (deploy/gunicorn.conf.py) once in the parent for all workers, otherwise before a worker's first caller.
_url_patterns = get_resolver().url_patterns
