"""The engine log as a byte stream with absolute offsets (what a log probe tails).

Line formatting lives in `enginesim.artifacts.loglines`; this module only stores and serves bytes.
"""

from __future__ import annotations

from pathlib import Path


class LogBuffer:
    """Append-only text with absolute byte offsets; keeps the newest `max_bytes`."""

    def __init__(self, max_bytes: int = 4 * 1024 * 1024, file_path: str | None = None) -> None:
        self.max_bytes = max_bytes
        self._buf = bytearray()
        self.start_offset = 0  # absolute offset of _buf[0]
        self._file = Path(file_path) if file_path else None
        if self._file is not None:
            self._file.parent.mkdir(parents=True, exist_ok=True)
            self._file.write_bytes(b"")

    @property
    def end_offset(self) -> int:
        return self.start_offset + len(self._buf)

    def write_line(self, line: str) -> None:
        data = (line.rstrip("\n") + "\n").encode()
        self._buf += data
        if self._file is not None:
            with self._file.open("ab") as f:
                f.write(data)
        excess = len(self._buf) - self.max_bytes
        if excess > 0:
            # Drop whole lines so a reader never starts mid-line after a trim.
            cut = self._buf.find(b"\n", excess)
            cut = len(self._buf) if cut < 0 else cut + 1
            del self._buf[:cut]
            self.start_offset += cut

    def read(self, offset: int, limit: int = 1024 * 1024) -> tuple[bytes, int, int]:
        """Bytes from `offset` (clamped to what is kept), next offset, first kept offset."""
        off = max(offset, self.start_offset)
        if off >= self.end_offset:
            return b"", self.end_offset, self.start_offset
        rel = off - self.start_offset
        chunk = bytes(self._buf[rel : rel + limit])
        return chunk, off + len(chunk), self.start_offset
