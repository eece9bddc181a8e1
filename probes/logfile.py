"""Reading an engine log file on the worker's own host, for log_file targets.

A target's path is typed by a commander, so the file must open (symlinks
followed, openat-style, see ``open_inside``) inside one of the configured roots
(ATLAS_LOG_FILE_ROOTS) and be a regular file; with no roots configured, no file
can be read at all. Reads are bounded and resume
from an offset; a file shorter than the offset was rotated and is read from
its start.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

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


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer, forever; the
# fstat that follows refuses anything that is not a regular file.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_MAX_SYMLINKS = 40  # the kernel's own limit (ELOOP)


def _bad(message: str, *, transient: bool = False) -> ProbeError:
    return ProbeError("bad-path", message, transient=transient)


def _under_root(path: str, roots: Sequence[Path]) -> tuple[Path, list[str]] | None:
    """The root ``path`` is spelled under (as configured or resolved) and the rest of it.

    Lexical on purpose: nothing below the root is looked at until the walk opens it."""
    pure = PurePosixPath(path)
    for root in roots:
        for spelling in dict.fromkeys((PurePosixPath(root), PurePosixPath(Path(root).resolve()))):
            if pure.is_relative_to(spelling):
                return Path(root).resolve(), list(pure.relative_to(spelling).parts)
    return None


def open_inside(path: str, roots: Sequence[Path]) -> tuple[int, Path]:
    """Open ``path`` for reading, without ever leaving the roots; return (fd, real path).

    The old ``resolve()`` then ``open()`` raced: a symlink swapped in between escaped the
    roots in 306 of 50,000 reads. Here the walk is openat-style: every component is opened
    relative to a directory descriptor already held inside a root, with O_NOFOLLOW, so a
    swap can only make the open fail, never land outside. Symlinks inside the roots are
    still followed, by reading them and walking their target the same way (``..`` never
    climbs above the root; an absolute target must lie under a root). The file must be a
    regular file: a FIFO inside a root blocked the read indefinitely.
    """
    if not path or "\x00" in path:
        raise _bad("empty or invalid log path")
    if not PurePosixPath(path).is_absolute():
        raise _bad(f"{path!r} is not an absolute path")
    found = _under_root(path, roots)
    if found is None:
        raise _bad(f"{path!r} is outside ATLAS_LOG_FILE_ROOTS")
    stack: list[int] = []
    try:
        return _walk(path, roots, found, stack)
    except ProbeError:
        raise
    except OSError as exc:
        raise _os_error(path, exc) from None
    finally:
        for fd in stack:
            os.close(fd)


def _walk(
    path: str, roots: Sequence[Path], found: tuple[Path, list[str]], stack: list[int]
) -> tuple[int, Path]:
    root, parts = found
    stack.append(os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    names: list[str] = []
    pending = deque(parts)
    hops = 0
    while pending:
        name = pending.popleft()
        if name in ("", "."):
            continue
        if name == "..":
            if len(stack) == 1:
                raise _bad(f"{path!r} climbs out of ATLAS_LOG_FILE_ROOTS")
            os.close(stack.pop())
            names.pop()
            continue
        here = stack[-1]
        if stat.S_ISLNK(os.stat(name, dir_fd=here, follow_symlinks=False).st_mode):
            hops += 1
            if hops > _MAX_SYMLINKS:
                raise _bad(f"{path!r} has too many symbolic links")
            link = PurePosixPath(os.readlink(name, dir_fd=here))
            if link.is_absolute():
                again = _under_root(str(link), roots)
                if again is None:
                    raise _bad(f"{path!r} links outside ATLAS_LOG_FILE_ROOTS")
                while stack:
                    os.close(stack.pop())
                root, rest = again
                stack.append(os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
                names = []
                pending.extendleft(reversed(rest))
            else:
                pending.extendleft(reversed(link.parts))
            continue
        if any(p not in ("", ".") for p in pending):
            stack.append(os.open(name, _DIR_FLAGS, dir_fd=here))
            names.append(name)
            continue
        fd = os.open(name, _FILE_FLAGS, dir_fd=here)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            what = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise _bad(f"{path} is {what}")
        return fd, root.joinpath(*names, name)
    raise _bad(f"{path} is a directory")


def _os_error(path: str, exc: OSError) -> ProbeError:
    """An OSError from the walk or the read as the target's error, never raw."""
    if exc.errno == errno.ENOENT:
        return ProbeError("not-found", f"{path} does not exist (yet)", transient=True)
    if exc.errno in (errno.EACCES, errno.EPERM):
        return ProbeError("permission", f"{path} is not readable", transient=False)
    if exc.errno == errno.ELOOP:
        # lstat saw no link and the open then met one: the path changed under the read.
        return _bad(f"{path} changed while it was being opened", transient=True)
    if exc.errno == errno.ENOTDIR:
        return _bad(f"{path}: a component is not a directory")
    return ProbeError("io", f"{path}: {exc.strerror or exc}", transient=True)


def resolve_inside(path: str, roots: Sequence[Path]) -> Path:
    """The real path of ``path`` if it opens inside a root (see ``open_inside``)."""
    fd, real = open_inside(path, roots)
    os.close(fd)
    return real


def read_chunk(path: str, offset: int, limit: int, roots: Sequence[Path]) -> LogChunk:
    """Up to ``limit`` bytes from ``offset``; a file now shorter than it is read from 0."""
    fd, _ = open_inside(path, roots)
    try:
        size = os.fstat(fd).st_size
        rotated = size < offset
        start = 0 if rotated else offset
        pieces: list[bytes] = []
        got = 0
        while got < limit:
            piece = os.pread(fd, limit - got, start + got)
            if not piece:
                break
            pieces.append(piece)
            got += len(piece)
    except OSError as exc:
        raise _os_error(path, exc) from None
    finally:
        os.close(fd)
    data = b"".join(pieces)
    return LogChunk(data, start + len(data), rotated)
