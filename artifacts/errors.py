"""The one error every artifact loader raises for input it will not analyse.

Uploads and probe-collected files are untrusted: whatever goes wrong with them (wrong kind,
hostile pickle, gzip bomb, truncation, a deadline) must end as a stored, human-readable
reason, never as a traceback or a half-written analysis.
"""

from __future__ import annotations


class ArtifactRejected(Exception):
    """Raised with one line that tells the operator why the file was not analysed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
