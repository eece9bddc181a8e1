"""Serve plotly.js from the file inside the plotly wheel, so the version always matches
the Python package that builds the figures and no CDN is ever involved."""

from __future__ import annotations

from pathlib import Path

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_DIR = Path(plotly.__file__).resolve().parent / "package_data"
PLOTLY_FILE = "plotly.min.js"
PUBLIC_PATH = "vendor/plotly/plotly.min.js"


class _PrefixedStorage(FileSystemStorage):
    prefix = "vendor/plotly"


class PlotlyFinder(BaseFinder):
    """Expose exactly one file of the wheel's package data, nothing else in that folder."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.storage = _PrefixedStorage(location=str(PLOTLY_DIR))

    def check(self, **kwargs) -> list:
        from django.core.checks import Error

        if not (PLOTLY_DIR / PLOTLY_FILE).is_file():
            return [
                Error(
                    f"plotly.js not found at {PLOTLY_DIR / PLOTLY_FILE}.",
                    hint="Reinstall the pinned plotly wheel (requirements.txt).",
                    id="atlas.E003",
                )
            ]
        return []

    def find(self, path: str, find_all: bool = False, **kwargs) -> str | list[str]:
        if path == PUBLIC_PATH:
            match = str(PLOTLY_DIR / PLOTLY_FILE)
            return [match] if find_all else match
        return [] if find_all else None

    def list(self, ignore_patterns):
        yield PLOTLY_FILE, self.storage
