"""Quantiles match numpy's default; the summary counts what was sent and what came back."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.report import Outcome, quantile, summarize


@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=200),
       st.sampled_from([0.0, 0.5, 0.9, 0.95, 0.99, 1.0]))  # fmt: skip
def test_quantile_matches_numpy(values, q):
    assert quantile(values, q) == pytest.approx(float(np.quantile(values, q)), abs=1e-9)


def test_empty_is_none_not_zero():
    assert quantile([], 0.5) is None
    report = summarize([])
    assert report["ttft_s"]["p50"] is None
    assert report["sent"] == 0


def test_summary_counts_by_status_and_priority():
    done = Outcome(0, 10, 3, 0, 0.0, status="ok", sent_at_s=0.0, ttft_s=0.2, e2e_s=0.5,
                   output_tokens=3, itl_s=[0.1, 0.2])  # fmt: skip
    urgent = Outcome(1, 20, 3, -1, 0.1, status="ok", sent_at_s=0.1, ttft_s=0.1, e2e_s=0.3,
                     output_tokens=3, itl_s=[0.1, 0.1])  # fmt: skip
    failed = Outcome(2, 30, 3, 0, 0.2, status="error", sent_at_s=0.2, error="HTTP 503")
    skipped = Outcome(3, 40, 3, 0, 0.3, status="skipped", error="client in-flight cap")
    report = summarize([done, urgent, failed, skipped], wall_s=2.0)
    assert report["statuses"] == {"error": 1, "ok": 2, "skipped": 1}
    assert report["sent"] == 3
    assert report["prompt_tokens_sent"] == 60
    assert report["output_tokens_received"] == 6
    assert report["itl_s"]["count"] == 4
    assert report["ttft_s"]["max"] == pytest.approx(0.2)
    assert report["by_priority"]["-1"]["count"] == 1
    assert report["errors"] == {"HTTP 503": 1, "client in-flight cap": 1}
    assert report["completed_per_s"] == pytest.approx(1.0)
