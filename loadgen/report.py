"""What came back: per-request outcomes and their summary (counts, TTFT / ITL / e2e).

Pure. Latencies come from the client's own clock on streamed responses: TTFT is the
first chunk that carries a token, ITL the gap between chunks divided by the tokens the
later chunk carried (a chunk may carry several when the server coalesces them; tokens
that come with the first one count as gaps of 0). On a busy machine the server's events
reach the client in bunches, so client-side ITL is a lower bound at the median and
bunchy at the tail; the engine's own histogram is what the playbooks read.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

QUANTILES = (0.5, 0.9, 0.95, 0.99)


@dataclass
class Outcome:
    seq: int
    prompt_tokens: int
    max_tokens: int
    priority: int
    planned_at_s: float
    status: str = "pending"  # ok | error | cancelled | skipped | pending
    sent_at_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    output_tokens: int = 0
    itl_s: list[float] = field(default_factory=list)
    http_status: int | None = None
    error: str | None = None
    finish_reason: str | None = None


def quantile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default); None when empty."""
    if not values:
        return None
    if not 0 <= q <= 1:
        raise ValueError("q must be in [0, 1]")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _dist(values: Sequence[float]) -> dict:
    out: dict[str, float | int | None] = {"count": len(values)}
    out["mean"] = sum(values) / len(values) if values else None
    for q in QUANTILES:
        out[f"p{round(q * 100)}"] = quantile(values, q)
    out["max"] = max(values) if values else None
    return out


def summarize(outcomes: Iterable[Outcome], wall_s: float | None = None) -> dict:
    """Counts of what was sent and what came back, and latency distributions (seconds)."""
    items = list(outcomes)
    statuses = Counter(o.status for o in items)
    ok = [o for o in items if o.status == "ok"]
    sent = [o for o in items if o.sent_at_s is not None]
    report = {
        "planned": len(items),
        "sent": len(sent),
        "statuses": dict(sorted(statuses.items())),
        "prompt_tokens_sent": sum(o.prompt_tokens for o in sent),
        "output_tokens_received": sum(o.output_tokens for o in items),
        "errors": dict(Counter(o.error for o in items if o.error).most_common(5)),
        "ttft_s": _dist([o.ttft_s for o in ok if o.ttft_s is not None]),
        "itl_s": _dist([gap for o in ok for gap in o.itl_s]),
        "e2e_s": _dist([o.e2e_s for o in ok if o.e2e_s is not None]),
        "by_priority": {
            str(p): _dist([o.ttft_s for o in ok if o.priority == p and o.ttft_s is not None])
            for p in sorted({o.priority for o in items})
        },
    }
    if wall_s:
        report["wall_s"] = wall_s
        report["sent_per_s"] = len(sent) / wall_s
        report["completed_per_s"] = len(ok) / wall_s
    return report
