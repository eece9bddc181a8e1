"""WSGI entry point (gunicorn atlas_console.wsgi)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "atlas_console.settings")
application = get_wsgi_application()
