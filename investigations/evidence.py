"""Evidence as it was shown: a JSON copy of a node's checks, stored with a decision so
the values it was decided on never change afterwards."""

from __future__ import annotations

from investigations.evaluation import NodeResult, bucket_json


def frozen_evidence(node: NodeResult) -> dict:
    return {
        "node": node.key,
        "suggestion": node.suggestion,
        "score": node.score,
        "checks": [
            {
                "id": c.id,
                "title": c.title,
                "measured": c.measured,
                "confirm_threshold": c.confirm_threshold,
                "eliminate_threshold": c.eliminate_threshold,
                "outcome": c.outcome,
                "reason": c.reason,
                "window_s": c.window_s,
                "span_s": c.span_s,
                "samples": c.samples,
                "first_at": c.first_at,
                "last_at": c.last_at,
                "bucket": bucket_json(c.interval),
                "observations": c.count,
                "needs_more_data": c.held or None,
            }
            for c in node.checks
        ],
    }
