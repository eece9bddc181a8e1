"""Upload bounds that hold before Django has read the body.

A declared ``Content-Length`` over the limit is refused at once; a body that grows past it
while streaming (chunked, or a lying header) is stopped by the handler mid-way, so a
client can never make the server spool more than the limit to disk.
"""

from __future__ import annotations

from django.conf import settings
from django.core.files.uploadhandler import FileUploadHandler, StopUpload
from django.http import HttpRequest

# Room for multipart boundaries and form fields around the file itself.
MULTIPART_OVERHEAD = 64 * 1024


class TooLarge(Exception):
    pass


def declared_too_large(request: HttpRequest) -> bool:
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return False
    return length > settings.ATLAS_ARTIFACT_MAX_BYTES + MULTIPART_OVERHEAD


class BoundedUploadHandler(FileUploadHandler):
    """Counts file bytes as they arrive and stops the upload past the artifact limit."""

    def new_file(self, *args, **kwargs) -> None:
        super().new_file(*args, **kwargs)
        self.received = 0

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes:
        self.received += len(raw_data)
        if self.received > settings.ATLAS_ARTIFACT_MAX_BYTES:
            self.request.artifact_too_large = True
            raise StopUpload(connection_reset=True)
        return raw_data

    def file_complete(self, file_size: int) -> None:
        return None


def install(request: HttpRequest) -> None:
    """Put the bound first, before Django's memory/temp-file handlers."""
    request.upload_handlers.insert(0, BoundedUploadHandler(request))
