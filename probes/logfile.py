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

# Offsets are stored in a signed 64-bit column (Target.log_offset): a larger one raised
# OverflowError inside the cycle's bulk update and lost every target's poll.
MAX_LOG_OFFSET = 2**63 - 1
_MAX_OFFSET_DIGITS = len(str(MAX_LOG_OFFSET))


class LogOffsetError(ValueError):
    """A log relay's ``X-Log-Next-Offset`` that is not an offset: the target's error."""

    kind = "bad-offset"


def next_offset(header: str | None, current: int, body_length: int) -> int:
    """Where the next read of an HTTP log relay starts.

    The relay (the simulator, a log shipper) says so in ``X-Log-Next-Offset``; without
    the header the bytes read are counted. The header comes from a target, so it is
    validated, not trusted: ASCII digits only (``int`` also takes signs, underscores,
    spaces and other scripts' digits), within 0..MAX_LOG_OFFSET. Anything else raises
    LogOffsetError, which fails this target's poll with a clear message and leaves its
    stored offset (and every other target's cycle) untouched.
    """
    if header is None:
        return min(current + body_length, MAX_LOG_OFFSET)
    value = header.strip()
    shown = value[:40] + ("..." if len(value) > 40 else "")
    if not (value.isascii() and value.isdigit()) or len(value) > _MAX_OFFSET_DIGITS:
        raise LogOffsetError(f"X-Log-Next-Offset {shown!r} is not a byte offset")
    offset = int(value)
    if offset > MAX_LOG_OFFSET:
        raise LogOffsetError(f"X-Log-Next-Offset {shown!r} is past the largest offset stored")
    return offset


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
