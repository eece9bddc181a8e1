"""System checks with stable ids, so operators can search for them.

atlas.E001  the data folder is not writable
atlas.E003  the vendored plotly.js is missing
atlas.W001  (deploy) production on the embedded SQLite database
atlas.W002  (deploy) production on the embedded filesystem broker
"""

from __future__ import annotations

import os

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register


@register()
def check_data_dir(app_configs, **kwargs) -> list:
    if not os.access(settings.DATA_DIR, os.W_OK):
        return [
            Error(
                f"ATLAS_DATA_DIR {settings.DATA_DIR} is not writable.",
                hint="Point ATLAS_DATA_DIR at a folder this user can write.",
                id="atlas.E001",
            )
        ]
    return []


@register()
def check_plotly_bundle(app_configs, **kwargs) -> list:
    from atlas_console.plotly_bundle import PLOTLY_DIR, PLOTLY_FILE

    if not (PLOTLY_DIR / PLOTLY_FILE).is_file():
        return [
            Error(
                f"plotly.js not found at {PLOTLY_DIR / PLOTLY_FILE}.",
                hint="Restore static/vendor/plotly from the repository.",
                id="atlas.E003",
            )
        ]
    return []


@register(Tags.security, deploy=True)
def check_embedded_services(app_configs, **kwargs) -> list:
    problems = []
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        problems.append(
            Warning(
                "The embedded SQLite database is meant for the single-machine demo.",
                hint="Set DATABASE_URL to a PostgreSQL database.",
                id="atlas.W001",
            )
        )
    if settings.ATLAS_EMBEDDED_BROKER:
        problems.append(
            Warning(
                "The embedded filesystem broker only reaches workers on this machine.",
                hint="Set CELERY_BROKER_URL to a Redis server.",
                id="atlas.W002",
            )
        )
    return problems
