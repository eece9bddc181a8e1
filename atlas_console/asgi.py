"""ASGI entry point, for servers that stream (server-sent events)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "atlas_console.settings")
application = get_asgi_application()
