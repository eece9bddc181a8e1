"""Telling artifact kinds apart by their first bytes, not by file names people chose."""

from __future__ import annotations

import zlib

from artifacts.bounded import GZIP_MAGIC

MEMORY_SNAPSHOT = "memory-snapshot"
CHROME_TRACE = "chrome-trace"
GC_LOG = "gc-log"
KINDS = (MEMORY_SNAPSHOT, CHROME_TRACE, GC_LOG)

_GC_MARKERS = (
    b"gc: collecting generation",
    b"gc: done,",
    b"gc: objects in each generation",
    b"ms to complete. Collected ",  # vLLM's VLLM_GC_DEBUG callback
)


def _gunzip_head(head: bytes) -> bytes:
    try:
        return zlib.decompressobj(wbits=47).decompress(head, 64 * 1024)
    except zlib.error:
        return b""


def sniff(head: bytes) -> str | None:
    """The kind the leading bytes (up to ~64 KiB of the file) look like, or None."""
    if head[:2] == GZIP_MAGIC:
        head = _gunzip_head(head)
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return MEMORY_SNAPSHOT
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if stripped[:1] == b"{":
        return CHROME_TRACE
    if any(marker in head for marker in _GC_MARKERS):
        return GC_LOG
    return None
