"""Signal values print with the unit their name carries."""

from __future__ import annotations

import pytest

from artifacts.units import bytes_text, signal_text


@pytest.mark.parametrize(
    ("name", "value", "text"),
    [
        ("artifact_reserved_bytes", 61_111_000_000, "56.91 GiB"),
        ("artifact_reserved_bytes", 512, "512 B"),
        ("artifact_allocated_slope_bytes_per_s", 3 << 20, "3.00 MiB/s"),
        ("artifact_leak_fraction", 0.25, "25.0 %"),
        ("artifact_trace_span_s", 0.562977, "563.0 ms"),
        ("artifact_trace_span_s", 12.5, "12.50 s"),
        ("artifact_gc_pause_p99_ms", 41.25, "41.2 ms"),
        ("artifact_trace_entries", 19342, "19,342"),
        ("artifact_oom_count", 0, "0"),
        ("artifact_reserved_bytes", None, "no data"),
    ],
)
def test_signal_text(name: str, value: float | None, text: str) -> None:
    assert signal_text(name, value) == text


def test_bytes_text_is_binary() -> None:
    assert bytes_text(1 << 30) == "1.00 GiB"
    assert bytes_text(1536) == "1.50 KiB"
