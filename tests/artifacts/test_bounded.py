"""The bounded reader every loader goes through: caps hold on hostile bytes."""

from __future__ import annotations

import gzip
import io
import zlib

import pytest

from artifacts.bounded import Deadline, Limits, mapped, read_all, stream
from artifacts.errors import ArtifactRejected
from artifacts.kinds import sniff
from tests.support.deadlines import ExpiresAfter

MiB = 1 << 20


def _bomb(expanded: int) -> bytes:
    """Gzip of ``expanded`` zero bytes, built without ever holding them."""
    out = io.BytesIO()
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(MiB)
    for _ in range(expanded // MiB):
        out.write(c.compress(block))
    out.write(c.flush())
    return out.getvalue()


def test_plain_and_gzip_and_concatenated_members_read_back():
    assert read_all(io.BytesIO(b"plain text")) == b"plain text"
    assert read_all(io.BytesIO(gzip.compress(b"x" * 3_000_000))) == b"x" * 3_000_000
    assert read_all(io.BytesIO(gzip.compress(b"ab") + gzip.compress(b"cd"))) == b"abcd"


def test_a_decompression_bomb_stops_at_the_cap_not_at_the_end():
    bomb = _bomb(64 * MiB)  # ~64 KiB compressed
    assert len(bomb) < MiB
    seen = 0
    with pytest.raises(ArtifactRejected, match="expands past the 16 MiB limit"):
        for chunk in stream(io.BytesIO(bomb), Limits(max_expanded_bytes=16 * MiB)):
            seen += len(chunk)
    assert seen <= 16 * MiB


def test_truncated_gzip_garbage_after_the_end_and_corrupt_data_are_named():
    data = gzip.compress(b"y" * 100_000)
    with pytest.raises(ArtifactRejected, match="truncated"):
        read_all(io.BytesIO(data[: len(data) // 2]))
    with pytest.raises(ArtifactRejected, match="unexpected bytes after the end"):
        read_all(io.BytesIO(data + b"trailing junk"))
    corrupt = bytearray(data)
    corrupt[20:40] = b"\xff" * 20
    with pytest.raises(ArtifactRejected, match=r"corrupt gzip|truncated"):
        read_all(io.BytesIO(bytes(corrupt)))


def test_size_cap_and_empty_file():
    with pytest.raises(ArtifactRejected, match="larger than the 1 MiB limit"):
        read_all(io.BytesIO(b"z" * (2 * MiB)), Limits(max_file_bytes=MiB))
    with pytest.raises(ArtifactRejected, match="empty"):
        read_all(io.BytesIO(b""))


def test_the_deadline_is_checked_between_chunks():
    with pytest.raises(ArtifactRejected, match="time limit"):
        read_all(io.BytesIO(b"w" * (3 * MiB)), Limits(deadline_s=-1))


@pytest.mark.parametrize(
    ("head", "kind"),
    [
        (b"\x80\x04\x95\x10\x00", "memory-snapshot"),
        (gzip.compress(b'{"traceEvents": []}'), "chrome-trace"),
        (b'\xef\xbb\xbf  {"schemaVersion": 1}', "chrome-trace"),
        (b"INFO 01-05 08:00:01 engine\ngc: collecting generation 2...\n", "gc-log"),
        (b"#!/bin/sh\nrm -rf /\n", None),
        (b"[1, 2, 3]", None),
        (b"\x80\x09", None),
    ],
)
def test_kinds_are_told_apart_by_their_bytes(head, kind):
    assert sniff(head) == kind


def test_many_concatenated_members_stream_in_bounded_memory():
    """640 gzip members of 16 MiB each: once the leftover input was doubled per member."""
    import tracemalloc

    member = gzip.compress(b" " * (16 * MiB))
    data = member * 64
    tracemalloc.start()
    total = 0
    with pytest.raises(ArtifactRejected, match="expands past"):
        for chunk in stream(io.BytesIO(data), Limits(max_expanded_bytes=512 * MiB)):
            total += len(chunk)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert total <= 512 * MiB
    assert peak < 3 * len(data) + 8 * MiB


# --- each limit at its boundary, and the reasons people read (issue 19.14: mutants that
# moved a limit by one, or a default, survived every test) ---------------------------------


def test_the_default_limits_are_the_documented_ones_and_cannot_be_changed_in_place():
    """docs/threat-model.md and the upload form state these; DEFAULT_LIMITS is shared by
    every analysis, so one caller assigning to it would change everyone's bounds."""
    import dataclasses

    assert (Limits().max_file_bytes, Limits().max_expanded_bytes) == (512 * MiB, 4096 * MiB)
    assert Limits().deadline_s == 300.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        Limits().max_file_bytes = 1  # type: ignore[misc]


def test_a_file_of_exactly_the_limit_is_read_and_one_byte_more_is_not():
    limits = Limits(max_file_bytes=MiB)
    assert len(read_all(io.BytesIO(b"x" * MiB), limits)) == MiB
    with pytest.raises(ArtifactRejected) as caught:
        read_all(io.BytesIO(b"x" * (MiB + 1)), limits)
    assert caught.value.reason == "file is larger than the 1 MiB limit"


def test_gzip_expanding_to_exactly_the_limit_is_read_and_one_byte_more_is_not():
    limits = Limits(max_expanded_bytes=MiB)
    assert len(read_all(io.BytesIO(gzip.compress(b"y" * MiB)), limits)) == MiB
    with pytest.raises(ArtifactRejected) as caught:
        read_all(io.BytesIO(gzip.compress(b"y" * (MiB + 1))), limits)
    assert caught.value.reason == ("gzip data expands past the 1 MiB limit (a decompression bomb?)")


def test_after_the_gzip_end_only_zero_padding_or_another_member_is_accepted():
    member = gzip.compress(b"data")
    assert read_all(io.BytesIO(member + b"\x00" * 512)) == b"data"  # tape/block padding
    for trailer in (b"XX", b"X\x00", b"\x00junk"):
        with pytest.raises(ArtifactRejected) as caught:
            read_all(io.BytesIO(member + trailer))
        assert caught.value.reason == "unexpected bytes after the end of the gzip data"


def test_broken_gzip_is_named_for_what_is_wrong():
    member = gzip.compress(b"some data" * 100)
    with pytest.raises(ArtifactRejected) as caught:
        read_all(io.BytesIO(member[:-12]))
    assert caught.value.reason == "gzip data ends early (truncated file)"
    with pytest.raises(ArtifactRejected) as caught:
        read_all(io.BytesIO(member[:10] + b"\xff" * 20 + member[30:]))
    assert caught.value.reason.startswith("corrupt gzip data: ")


def test_an_expired_deadline_says_which_limit():
    from artifacts.bounded import Deadline

    deadline = Deadline(-1.0)  # already past: no sleeping, no wall clock
    with pytest.raises(ArtifactRejected) as caught:
        deadline.check()
    assert caught.value.reason == "analysis exceeded its time limit of -1 s"
    Deadline(3600.0).check()  # far off: passes


def test_a_path_is_read_like_a_stream_and_an_empty_file_is_refused_by_name(tmp_path):
    """The upload task passes a path, not a file object (second bounded run's survivors)."""
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    assert read_all(path) == read_all(str(path)) == b'{"traceEvents": []}'
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    with pytest.raises(ArtifactRejected) as caught:
        read_all(empty)
    assert caught.value.reason == "file is empty"


def test_the_map_keeps_the_callers_deadline(tmp_path):
    """``mapped`` (the pickle loader's reader) runs under the deadline it is given, not a
    fresh default one: an analysis that has spent its time stops reading."""
    path = tmp_path / "artifact.bin"
    path.write_bytes(b"w" * (3 * MiB))
    with pytest.raises(ArtifactRejected, match="time limit"), mapped(path, deadline=Deadline(-1.0)):
        pass
    with mapped(path) as view:
        assert len(view) == 3 * MiB


# --- guard-removal mutants (.ci/guard-mutants): each limit reaches the place it is enforced ----


def test_the_deadline_is_checked_between_decompression_steps():
    """A 64 MiB bomb is one compressed chunk, so the raw reader looks at the clock once:
    the decompressor must look at it after every expanded MiB, or one small file expands
    for as long as it likes."""
    bomb = _bomb(64 * MiB)
    assert len(bomb) < MiB  # a single raw chunk
    seen = 0
    with pytest.raises(ArtifactRejected, match="time limit"):
        for chunk in stream(io.BytesIO(bomb), deadline=ExpiresAfter(3)):
            seen += len(chunk)
    # One check for the raw chunk, one per decompression step: two steps got through.
    assert seen == 2 * MiB


def test_a_path_is_read_under_the_callers_limits_and_deadline(tmp_path):
    """The upload task passes a path: the size cap and deadline it gives hold for a path
    as for a file object."""
    path = tmp_path / "artifact.bin"
    path.write_bytes(b"x" * (MiB + 1))
    for source in (path, str(path)):
        with pytest.raises(ArtifactRejected) as caught:
            read_all(source, Limits(max_file_bytes=MiB))
        assert caught.value.reason == "file is larger than the 1 MiB limit"
        with pytest.raises(ArtifactRejected) as caught:
            read_all(source, deadline=Deadline(-1.0))
        assert caught.value.reason == "analysis exceeded its time limit of -1 s"
    assert len(read_all(path)) == MiB + 1


def test_the_map_applies_the_callers_limits(tmp_path):
    """``mapped`` (what the pickle loader reads through) fills its map under the caller's
    expansion cap, and without a deadline under the caller's ``deadline_s``."""
    path = tmp_path / "snapshot.pickle.gz"
    path.write_bytes(gzip.compress(b"y" * (2 * MiB)))
    with pytest.raises(ArtifactRejected) as caught, mapped(path, Limits(max_expanded_bytes=MiB)):
        pass
    assert caught.value.reason == "gzip data expands past the 1 MiB limit (a decompression bomb?)"
    with pytest.raises(ArtifactRejected) as caught, mapped(path, Limits(deadline_s=-1.0)):
        pass
    assert caught.value.reason == "analysis exceeded its time limit of -1 s"
    with mapped(path, Limits(max_expanded_bytes=2 * MiB)) as view:
        assert len(view) == 2 * MiB
