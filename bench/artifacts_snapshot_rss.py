"""Peak RSS of loading a gzip memory snapshot, against its expanded size (issue 19, finding 3).

    python bench/artifacts_snapshot_rss.py [EXPANDED_MIB] [PACKAGE_ROOT]

Writes a gzip snapshot whose bulk is N MiB of 8 MiB byte strings under a key the schema
ignores (what a hostile upload would hold), loads it with ``load_snapshot`` in this process
and prints one JSON line: the expanded size and the peak RSS growth over the baseline taken
after imports (``resource.getrusage``). PACKAGE_ROOT loads ``artifacts`` from elsewhere (an
older checkout) for a before/after.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import resource
import sys
import tempfile
from pathlib import Path

MiB = 1 << 20


def write_snapshot(path: str, expanded_mib: int) -> int:
    piece = 8 * MiB
    payload = [bytes([i % 251]) * piece for i in range(max(1, expanded_mib // 8))]
    snapshot = {"segments": [], "device_traces": [[]], "padding": payload}
    data = pickle.dumps(snapshot, protocol=4)
    del payload, snapshot
    with gzip.open(path, "wb", compresslevel=1) as fh:
        fh.write(data)
    return len(data)


def main() -> None:
    expanded_mib = int(sys.argv[1]) if len(sys.argv) > 1 else 512
    root = sys.argv[2] if len(sys.argv) > 2 else str(Path(__file__).resolve().parents[1])
    sys.path.insert(0, root)
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "snapshot.pickle.gz")
        if os.fork() == 0:  # written by a child: the parent's peak is the load's alone
            write_snapshot(path, expanded_mib)
            os._exit(0)
        os.wait()
        from artifacts.bounded import Limits
        from artifacts.memory_snapshot import load_snapshot

        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        limits = Limits(max_file_bytes=1 << 40, max_expanded_bytes=1 << 40, deadline_s=3600)
        load_snapshot(path, limits)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        size = Path(path).stat().st_size
    expanded = (expanded_mib // 8) * 8 * MiB
    print(json.dumps({
        "file_bytes": size, "expanded_bytes": expanded, "peak_growth_bytes": peak - base,
        "growth_over_expanded": round((peak - base) / expanded, 2),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
