"""A log relay's next offset is validated, not trusted (issue 19.2).

``X-Log-Next-Offset: 99999999999999999999999`` once raised OverflowError in the cycle's
bulk update and lost every target's poll; ``int`` also accepts signs, underscores and
other scripts' digits. The end-to-end attack is in test_poll_task.
"""

from __future__ import annotations

import pytest

from probes.logfile import MAX_LOG_OFFSET, LogOffsetError, next_offset


@pytest.mark.parametrize(
    "header",
    ["99999999999999999999999", str(2**63), "-5", "+5", "1_000", " ", "١٢٣", "0x10", "1e3"],
)
def test_a_next_offset_that_is_not_a_64_bit_byte_offset_is_refused(header):
    with pytest.raises(LogOffsetError) as caught:
        next_offset(header, 100, 10)
    assert caught.value.kind == "bad-offset"


@pytest.mark.parametrize(
    ("header", "expected"),
    [(None, 110), ("0", 0), ("4096", 4096), (" 77 ", 77), (str(MAX_LOG_OFFSET), MAX_LOG_OFFSET)],
)
def test_a_valid_next_offset_is_kept_and_a_missing_one_counts_bytes(header, expected):
    assert next_offset(header, 100, 10) == expected
