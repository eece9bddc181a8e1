"""Start a process whose output goes to a log file, without ever leaking the file handle.

The child gets its own copy of the descriptor, so the parent closes its handle as soon as
``Popen`` returns, or at once when ``Popen`` (or resolving the binary before it) raises. A
handle left open is a ``ResourceWarning`` at garbage collection, which warnings-as-errors
turns into a failure of whichever test happens to be running then.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path


def spawn_logged(
    args: Sequence[str], log_path: Path, *, append: bool = False, **popen_kwargs
) -> subprocess.Popen:
    """``Popen(args)`` with stdout and stderr appended (or written) to ``log_path``.

    Resolve the binary (and skip for a missing one) before calling this: nothing is
    opened until every argument is known."""
    with log_path.open("ab" if append else "wb") as log:
        return subprocess.Popen(list(args), stdout=log, stderr=subprocess.STDOUT, **popen_kwargs)
