"""Reading an engine log file on the worker's own host, for log_file targets.

A target's path is typed by a commander, so the file must resolve (symlinks
followed) inside one of the configured roots (ATLAS_LOG_FILE_ROOTS); with no
roots configured, no file can be read at all. Reads are bounded and resume
from an offset; a file shorter than the offset was rotated and is read from
its start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from probes.net import ProbeError


@dataclass(frozen=True)
class LogChunk:
    data: bytes
    next_offset: int
    rotated: bool


def resolve_inside(path: str, roots: Sequence[Path]) -> Path:
    """The real path of ``path`` if it lies inside a root; ProbeError otherwise."""
    if not path or "\x00" in path:
        raise ProbeError("bad-path", "empty or invalid log path", transient=False)
    candidate = Path(path)
    if not candidate.is_absolute():
        raise ProbeError("bad-path", f"{path!r} is not an absolute path", transient=False)
    real = candidate.resolve()
    for root in roots:
        if real.is_relative_to(root.resolve()):
            return real
    raise ProbeError("bad-path", f"{path!r} is outside ATLAS_LOG_FILE_ROOTS", transient=False)


def read_chunk(path: str, offset: int, limit: int, roots: Sequence[Path]) -> LogChunk:
    real = resolve_inside(path, roots)
    try:
        with real.open("rb") as handle:
            size = handle.seek(0, 2)
            rotated = size < offset
            start = 0 if rotated else offset
            handle.seek(start)
            data = handle.read(limit)
    except FileNotFoundError:
        raise ProbeError("not-found", f"{path} does not exist (yet)", transient=True) from None
    except IsADirectoryError:
        raise ProbeError("bad-path", f"{path} is a directory", transient=False) from None
    except PermissionError:
        raise ProbeError("permission", f"{path} is not readable", transient=False) from None
    except OSError as exc:
        raise ProbeError("io", f"{path}: {exc.strerror or exc}", transient=True) from None
    return LogChunk(data, start + len(data), rotated)
