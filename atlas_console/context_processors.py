"""Values every page needs: which environment this is, so a demo is never mistaken for prod."""

from django.conf import settings
from django.http import HttpRequest


def atlas(request: HttpRequest) -> dict:
    return {
        "ATLAS_ENV": settings.ATLAS_ENV,
        "ATLAS_EMBEDDED_BROKER": settings.ATLAS_EMBEDDED_BROKER,
    }
