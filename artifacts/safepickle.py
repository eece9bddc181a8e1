"""A loader for untrusted pickles that may only hold plain data.

PyTorch writes CUDA memory snapshots with ``pickle.dump``; users upload them, so a file may
be hostile. The stock unpickler executes code (``GLOBAL`` + ``REDUCE`` is ``os.system``), and
even data-only opcodes can hurt: a 1e6-deep tuple used as a dict key overflows the C stack
while the unpickler hashes it (a segfault, measured on CPython 3.11), ``LONG_BINPUT
0xffffffff`` makes the C unpickler allocate a 32 GiB memo, and memo references build cycles
and DAGs whose naive expansion is exponential.

So loading is three passes, none of which executes anything:

1. ``pickletools.genops`` parses the opcodes (it only reads). Any opcode outside the data
   whitelist PyTorch emits is rejected with its name and byte offset. The same pass
   simulates the unpickler's stack to bound nesting depth, stack size, marks, memo indexes,
   string/bytes/long payloads, the opcode count and the wall-clock deadline.
2. ``pickle.Unpickler`` with a ``find_class`` that always raises (defence in depth: the
   whitelist already excludes every opcode that could reach it) builds the objects.
3. An explicit-stack walk checks the result is acyclic, within the depth limit and within a
   container budget. Shared containers (pickle memo) are legitimate, PyTorch shares frame
   lists between trace entries, so they are visited once: the walk is linear in the file.

Every failure ends as :class:`artifacts.errors.ArtifactRejected` with a one-line reason.
"""

from __future__ import annotations

import functools
import gc
import io
import itertools
import mmap
import pickle  # used only through _DataOnlyUnpickler, after the opcode pre-scan
import pickletools
import re
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

from artifacts.bounded import DEFAULT_LIMITS, Deadline, Limits, mapped
from artifacts.errors import ArtifactRejected

MiB = 1 << 20

# Stack effect of each allowed opcode, by kind. PUSH: one new item. NOOP: none. The rest are
# handled explicitly in _Scan.run. Covers everything PyTorch's Python and C++ picklers write
# for snapshots (reference §1.7) plus the data opcodes MemoryViz.js also accepts.
_PUSH = frozenset(
    {
        "NONE", "NEWTRUE", "NEWFALSE", "BININT", "BININT1", "BININT2", "LONG1", "LONG4",
        "BINFLOAT", "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "SHORT_BINBYTES",
        "BINBYTES", "BINBYTES8", "EMPTY_LIST", "EMPTY_DICT", "EMPTY_TUPLE",
    }
)  # fmt: skip
_CONTAINER_PUSH = frozenset({"EMPTY_LIST", "EMPTY_DICT"})
_NOOP = frozenset({"PROTO", "FRAME", "MEMOIZE", "BINPUT", "LONG_BINPUT"})
_OTHER = frozenset(
    {
        "MARK", "APPEND", "APPENDS", "SETITEM", "SETITEMS", "TUPLE", "TUPLE1", "TUPLE2",
        "TUPLE3", "LIST", "DICT", "BINGET", "LONG_BINGET", "STOP",
    }
)  # fmt: skip
ALLOWED_OPCODES = _PUSH | _NOOP | _OTHER
_PAYLOAD = frozenset(
    {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "SHORT_BINBYTES", "BINBYTES", "BINBYTES8"}
)
_CODE2OP = {op.code: op for op in pickletools.opcodes}
_I32 = struct.Struct("<i").unpack_from
_U32 = struct.Struct("<I").unpack_from
_U64 = struct.Struct("<Q").unpack_from

# A dict key may be a scalar or a tuple of scalars (depth <= 1): the C unpickler hashes each
# key without caching, so a tuple of shared tuples costs 2**depth (136 bytes of depth 26 take
# 0.8 CPU-s; depth 40, hours, with no deadline check inside the C call).
_NESTED_KEY = "pickle dict key at byte {} nests containers (hashing it could take exponential time)"


@dataclass(frozen=True)
class PickleLimits:
    """What the structure of one pickle may cost, on top of :class:`bounded.Limits`.

    Defaults are far above real snapshots (nesting <= 9, stack <= ~1,100 items because the
    pickler batches 1,000 items per APPENDS/SETITEMS, ints < 2**64) and far below what
    would hurt a worker.
    """

    max_depth: int = 64
    max_stack: int = 100_000
    max_marks: int = 64
    max_string_bytes: int = 16 * MiB
    max_long_bytes: int = 32
    max_opcodes: int = 200_000_000
    max_containers: int = 50_000_000


DEFAULT_PICKLE_LIMITS = PickleLimits()


class _DataOnlyUnpickler(pickle.Unpickler):
    """The documented "restricting globals" pattern: no class or global, ever."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent ids are not allowed")


# The pickle's bytes: in memory (small inputs, tests) or a read-only map of the expanded
# file (``bounded.mapped``), so that a 2 GiB snapshot is not also 2-4 GiB of heap.
Buffer = bytes | mmap.mmap


def _file(data: Buffer) -> IO[bytes]:
    """A file over ``data`` at offset 0 for pickletools' readers and the unpickler."""
    if isinstance(data, mmap.mmap):
        data.seek(0)
        return data  # type: ignore[return-value]  # mmap has read/readline/seek/tell
    return io.BytesIO(data)


_DROP_EVERY = 64 * MiB


def _drop(view: mmap.mmap, start: int = 0, end: int | None = None) -> None:
    """Unmap pages already read (they stay in the page cache): touched pages of a map count
    in the process's RSS until dropped, which would bring back the copy the map avoids."""
    if hasattr(mmap, "MADV_DONTNEED"):
        end = len(view) if end is None else end
        if end > start:
            view.madvise(mmap.MADV_DONTNEED, start, end - start)


class _MapReader(io.RawIOBase):
    """The map front to back for the unpickler, dropping each 64 MiB behind it."""

    def __init__(self, view: mmap.mmap) -> None:
        self.view = view
        self.pos = 0
        self.dropped = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), len(self.view) - self.pos)
        buffer[:n] = self.view[self.pos : self.pos + n]
        self.pos += n
        if self.pos - self.dropped >= _DROP_EVERY:
            cut = self.pos - self.pos % mmap.PAGESIZE
            _drop(self.view, self.dropped, cut)
            self.dropped = cut
        return n


def _stream(data: Buffer) -> IO[bytes]:
    """The unpickler's input: bytes in memory, or the map read front to back."""
    if isinstance(data, mmap.mmap):
        _drop(data)  # the scans touched every page
        return io.BufferedReader(_MapReader(data), 1 * MiB)
    return io.BytesIO(data)


def _count(data: Buffer, byte: bytes) -> int:
    """``data.count(byte)`` (an mmap has no count), 16 MiB at a time."""
    if isinstance(data, bytes):
        return data.count(byte)
    step = 16 * MiB
    return sum(data[i : i + step].count(byte) for i in range(0, len(data), step))


def _reject(reason: str) -> ArtifactRejected:
    return ArtifactRejected(reason)


def _pop_to_mark(stack: list[int], marks: list[int], name: str, pos: int) -> list[int]:
    if not marks:
        raise _reject(f"pickle opcode {name} at byte {pos} has no MARK")
    start = marks.pop()
    items = stack[start:]
    del stack[start:]
    return items


def _pop(stack: list[int], marks: list[int], n: int, name: str, pos: int) -> list[int]:
    floor = marks[-1] if marks else 0
    if len(stack) - floor < n:
        raise _reject(f"pickle opcode {name} at byte {pos} pops an empty stack")
    items = stack[-n:]
    del stack[-n:]
    return items


def _read_op(data: Buffer, f: IO[bytes], p: int) -> tuple[pickletools.OpcodeInfo, Any, int]:
    """The opcode at byte ``p``, its argument and the next offset, exactly as genops reads it.

    Raises the ValueError that ``pickletools.genops`` raises for an unknown opcode, a short
    argument or data that ends before STOP (the readers are pickletools' own).
    """
    code = data[p : p + 1]
    op = _CODE2OP.get(code.decode("latin-1"))
    if op is None:
        if not code:
            raise ValueError("pickle exhausted before seeing STOP")
        raise ValueError(f"at position {p}, opcode {code!r} unknown")
    if op.arg is None:
        return op, None, p + 1
    f.seek(p + 1)
    if op.name in ALLOWED_OPCODES:
        arg = op.arg.reader(f)
    else:
        # Read as genops does (the same errors), but a refused opcode's text argument
        # (GLOBAL's, through codecs.escape_decode) may warn on an invalid escape such as
        # b"\\J": found by the opcode-soup fuzzer, an error under the test suite's filters.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            arg = op.arg.reader(f)
    return op, arg, f.tell()


def _step(
    data: Buffer,
    f: IO[bytes],
    p: int,
    count: int,
    stack: list[int],
    marks: list[int],
    memo: list[int],
    limits: PickleLimits,
    deadline: Deadline,
) -> tuple[int, int, bool]:
    """Scan the one opcode at byte ``p``: the reference semantics, opcode by opcode.

    Returns (the next offset, the opcode count, whether it was STOP). Every rejection of
    :func:`prescan` is raised here; the fast loop only hands over whatever it cannot prove
    harmless, so the reasons are the same whichever path met the opcode.
    """
    op, arg, nxt = _read_op(data, f, p)
    pos = p
    count += 1
    if not count & 0xFFFF:
        deadline.check()
        if count > limits.max_opcodes:
            raise _reject(f"pickle has more than {limits.max_opcodes:,} opcodes")
    name = op.name
    if count == 1:
        if name != "PROTO" or not 2 <= arg <= 5:
            raise _reject("not a pickle of protocol 2-5 (no PROTO opcode at byte 0)")
        return nxt, count, False
    max_depth = limits.max_depth
    if name in _PUSH:
        if name in _PAYLOAD and len(arg) > limits.max_string_bytes:
            raise _reject(
                f"pickle string at byte {pos} is {len(arg):,} bytes "
                f"(limit {limits.max_string_bytes:,})"
            )
        if name in ("LONG1", "LONG4") and arg.bit_length() > 8 * limits.max_long_bytes:
            raise _reject(
                f"pickle integer at byte {pos} has {arg.bit_length():,} bits "
                f"(limit {8 * limits.max_long_bytes})"
            )
        stack.append(1 if name in _CONTAINER_PUSH else 0)
        if len(stack) > limits.max_stack:
            raise _reject(
                f"pickle stack exceeds {limits.max_stack:,} items at byte {pos} "
                "(nested too deeply?)"
            )
    elif name in ("BINGET", "LONG_BINGET"):
        if arg >= len(memo):
            raise _reject(f"pickle memo index {arg} at byte {pos} was never stored")
        stack.append(memo[arg])
        if len(stack) > limits.max_stack:
            raise _reject(f"pickle stack exceeds {limits.max_stack:,} items at byte {pos}")
    elif name in ("MEMOIZE", "BINPUT", "LONG_BINPUT"):
        if not stack or (marks and len(stack) == marks[-1]):
            raise _reject(f"pickle opcode {name} at byte {pos} has nothing to store")
        index = len(memo) if name == "MEMOIZE" else arg
        # The C unpickler sizes its memo array by the index: never let it jump.
        if index > len(memo):
            raise _reject(f"pickle memo index {index} at byte {pos} skips ahead")
        if index == len(memo):
            memo.append(stack[-1])
        else:
            memo[index] = stack[-1]
    elif name == "MARK":
        marks.append(len(stack))
        if len(marks) > limits.max_marks:
            raise _reject(f"pickle nests more than {limits.max_marks} MARKs at byte {pos}")
    elif name == "APPEND" or name == "SETITEM":
        items = _pop(stack, marks, 1 if name == "APPEND" else 2, name, pos)
        if name == "SETITEM" and items[0] > 1:
            raise _reject(_NESTED_KEY.format(pos))
        _fill(stack, marks, items, name, pos, max_depth)
    elif name == "APPENDS" or name == "SETITEMS":
        items = _pop_to_mark(stack, marks, name, pos)
        if name == "SETITEMS" and len(items) % 2:
            raise _reject(f"pickle SETITEMS at byte {pos} has an odd item count")
        if name == "SETITEMS" and max(items[0::2], default=0) > 1:
            raise _reject(_NESTED_KEY.format(pos))
        _fill(stack, marks, items, name, pos, max_depth)
    elif name in ("TUPLE", "LIST", "DICT"):
        items = _pop_to_mark(stack, marks, name, pos)
        if name == "DICT" and max(items[0::2], default=0) > 1:
            raise _reject(_NESTED_KEY.format(pos))
        stack.append(_depth_of(items, pos, max_depth))
    elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
        items = _pop(stack, marks, int(name[-1]), name, pos)
        stack.append(_depth_of(items, pos, max_depth))
    elif name == "STOP":
        if len(stack) != 1 or marks:
            raise _reject(f"pickle STOP at byte {pos} leaves a malformed stack")
        return nxt, count, True
    elif name in _NOOP:
        if name == "FRAME" and arg > len(data) - pos:
            raise _reject(f"pickle frame at byte {pos} runs past the end of the file")
    else:
        raise _reject(f"pickle opcode {name} at byte {pos} is not allowed (not plain data)")
    return nxt, count, False


def prescan(data: Buffer, limits: PickleLimits, deadline: Deadline) -> int:
    """Parse every opcode without building objects; return the opcode count.

    The simulated stack holds one int per item: the nesting depth of the object it stands
    for (0 for scalars). Tuples are immutable, so their depth is exact, and that is what the
    C unpickler hashes recursively when a tuple is a dict key.

    Two paths share that state. :func:`_step` is the reference: it reads one opcode with
    pickletools' own argument readers and applies every check, so it raises each rejection
    with its reason. The fast loop below reads the allowed opcodes straight from the bytes,
    in chunks of opcodes that cannot cross an opcode-budget/deadline checkpoint, overflow
    the stack (each opcode pushes at most one item) or read a fixed-size argument past the
    end (each such opcode spans at most 9 bytes). Whenever a check would fail, or the opcode
    is anything else (STOP, a refused one, the first one), it stops *before changing any
    state* and hands that opcode to :func:`_step`; an IndexError (no MARK, an unknown memo
    index, an empty stack) or a UnicodeDecodeError hands it over the same way.
    """
    stack: list[int] = []
    marks: list[int] = []
    memo: list[int] = []
    n = len(data)
    f = _file(data)
    max_stack = limits.max_stack
    max_marks = limits.max_marks
    max_depth = limits.max_depth
    max_str = limits.max_string_bytes
    max_long = limits.max_long_bytes
    max_bits = 8 * max_long
    i32, u32, u64 = _I32, _U32, _U64
    count = 0  # opcodes parsed so far
    pos = 0  # offset of the last opcode parsed (genops' last yield)
    p = 0  # offset of the next opcode
    stopped = False
    try:
        while not stopped:
            chunk = min(max_stack - len(stack), 0xFFFF - (count & 0xFFFF), (n - p) // 9)
            if count and chunk > 0:
                limit = count + chunk
                resume = False
                try:
                    # count: opcodes parsed before this one (a range: cheaper than += 1)
                    for count in range(limit - chunk, limit):
                        op = data[p]
                        if op == 106:  # LONG_BINGET
                            stack.append(memo[u32(data, p + 1)[0]])
                            pos = p
                            p += 5
                        elif op == 104:  # BINGET
                            stack.append(memo[data[p + 1]])
                            pos = p
                            p += 2
                        elif op == 148:  # MEMOIZE
                            if marks and marks[-1] == len(stack):
                                break
                            memo.append(stack[-1])
                            pos = p
                            p += 1
                        elif op == 40:  # MARK
                            if len(marks) >= max_marks:
                                break
                            marks.append(len(stack))
                            pos = p
                            p += 1
                        elif op == 117 or op == 101:  # SETITEMS, APPENDS
                            start = marks[-1]
                            k = len(stack) - start
                            if (
                                (op == 117 and (k & 1 or (k and max(stack[start::2]) > 1)))
                                or not start
                                or (len(marks) > 1 and marks[-2] == start)
                            ):
                                break
                            if k:
                                d = 1 + max(stack[start:])
                                if d > max_depth:
                                    break
                                del stack[start:]
                                if d > stack[-1]:
                                    stack[-1] = d
                            elif stack[-1] < 1:
                                stack[-1] = 1
                            marks.pop()
                            pos = p
                            p += 1
                        elif op == 138:  # LONG1
                            k = data[p + 1]
                            e = p + 2 + k
                            if e > n or (
                                k > max_long
                                and int.from_bytes(
                                    data[p + 2 : e], "little", signed=True
                                ).bit_length()
                                > max_bits
                            ):
                                break
                            stack.append(0)
                            pos = p
                            p = e
                            if e + 9 * (limit - count - 1) > n:
                                resume = True
                                break
                        elif op == 75:  # BININT1
                            stack.append(0)
                            pos = p
                            p += 2
                        elif op == 74:  # BININT
                            stack.append(0)
                            pos = p
                            p += 5
                        elif op == 77:  # BININT2
                            stack.append(0)
                            pos = p
                            p += 3
                        elif op == 125 or op == 93:  # EMPTY_DICT, EMPTY_LIST
                            stack.append(1)
                            pos = p
                            p += 1
                        elif op == 78 or op == 136 or op == 137 or op == 41:
                            # NONE, NEWTRUE, NEWFALSE, EMPTY_TUPLE
                            stack.append(0)
                            pos = p
                            p += 1
                        elif op == 71:  # BINFLOAT
                            stack.append(0)
                            pos = p
                            p += 9
                        elif op == 140 or op == 88 or op == 141:
                            # SHORT_BINUNICODE, BINUNICODE, BINUNICODE8
                            if op == 140:
                                b = p + 2
                                e = b + data[p + 1]
                            elif op == 88:
                                b = p + 5
                                e = b + u32(data, p + 1)[0]
                            else:
                                b = p + 9
                                e = b + u64(data, p + 1)[0]
                            # genops decodes it (invalid UTF-8 is corrupt); the limit
                            # counts characters
                            if e > n or len(str(data[b:e], "utf-8", "surrogatepass")) > max_str:
                                break
                            stack.append(0)
                            pos = p
                            p = e
                            if e + 9 * (limit - count - 1) > n:
                                resume = True
                                break
                        elif op == 67 or op == 66 or op == 142:
                            # SHORT_BINBYTES, BINBYTES, BINBYTES8
                            if op == 67:
                                k = data[p + 1]
                                e = p + 2 + k
                            elif op == 66:
                                k = u32(data, p + 1)[0]
                                e = p + 5 + k
                            else:
                                k = u64(data, p + 1)[0]
                                e = p + 9 + k
                            if e > n or k > max_str:
                                break
                            stack.append(0)
                            pos = p
                            p = e
                            if e + 9 * (limit - count - 1) > n:
                                resume = True
                                break
                        elif op == 139:  # LONG4
                            k = i32(data, p + 1)[0]
                            e = p + 5 + k
                            if (
                                k < 0
                                or e > n
                                or (
                                    k > max_long
                                    and int.from_bytes(
                                        data[p + 5 : e], "little", signed=True
                                    ).bit_length()
                                    > max_bits
                                )
                            ):
                                break
                            stack.append(0)
                            pos = p
                            p = e
                            if e + 9 * (limit - count - 1) > n:
                                resume = True
                                break
                        elif op == 97 or op == 115:  # APPEND, SETITEM
                            k = 2 if op == 97 else 3
                            if len(stack) - (marks[-1] if marks else 0) < k:
                                break
                            if k == 3 and stack[-2] > 1:
                                break
                            d = 1 + (stack[-1] if k == 2 else max(stack[-1], stack[-2]))
                            if d > max_depth:
                                break
                            del stack[1 - k :]
                            if d > stack[-1]:
                                stack[-1] = d
                            pos = p
                            p += 1
                        elif 133 <= op <= 135:  # TUPLE1, TUPLE2, TUPLE3
                            k = op - 132
                            if len(stack) - (marks[-1] if marks else 0) < k:
                                break
                            d = 1 + max(stack[-k:])
                            if d > max_depth:
                                break
                            del stack[-k:]
                            stack.append(d)
                            pos = p
                            p += 1
                        elif op == 116 or op == 108 or op == 100:  # TUPLE, LIST, DICT
                            start = marks[-1]
                            if op == 100 and max(stack[start::2], default=0) > 1:
                                break
                            d = 1 + max(stack[start:], default=0)
                            if d > max_depth:
                                break
                            del stack[start:]
                            marks.pop()
                            stack.append(d)
                            pos = p
                            p += 1
                        elif op == 113 or op == 114:  # BINPUT, LONG_BINPUT
                            k = data[p + 1] if op == 113 else u32(data, p + 1)[0]
                            if not stack or (marks and marks[-1] == len(stack)) or k > len(memo):
                                break
                            if k == len(memo):
                                memo.append(stack[-1])
                            else:
                                memo[k] = stack[-1]
                            pos = p
                            p += 2 if op == 113 else 5
                        elif op == 149:  # FRAME: a length-prefixed region; opcodes go on
                            if u64(data, p + 1)[0] > n - p:
                                break
                            pos = p
                            p += 9
                        elif op == 128:  # PROTO after the first opcode: no effect
                            pos = p
                            p += 2
                        else:  # STOP, a refused or unknown opcode: the reference decides
                            break
                    else:
                        count = limit
                        continue
                except (IndexError, UnicodeDecodeError):
                    pass  # raised before any state changed: the reference decides
                if resume:
                    count += 1
                    continue
            q = p
            p, count, stopped = _step(data, f, p, count, stack, marks, memo, limits, deadline)
            pos = q
    except ValueError as exc:
        # An unknown opcode, a short argument or data that ends before STOP.
        if count == 0:
            raise _reject(f"not a pickle ({exc})") from None
        raise _reject(f"truncated or corrupt pickle after byte {pos}: {exc}") from None
    if not stopped:
        raise _reject("truncated pickle: no STOP opcode")
    if pos + 1 != len(data):
        raise _reject(f"{len(data) - pos - 1:,} unexpected bytes after the pickle's STOP opcode")
    return count


# --- the fast path: a token grammar matched by ``re`` ------------------------------------------
#
# ``prescan`` simulates the unpickler's stack opcode by opcode in Python: exact, but ~1 us an
# opcode, 5-10x the C unpickler itself. What the C unpickler needs to be safe is less than the
# whole simulation, and most of it is a property of the *token stream*, which a regex checks at
# C speed (each opcode's first byte fixes how long it is, so the tokenisation is unique):
#
# - only data opcodes occur (the grammar has no other token); ``find_class`` refuses anyway;
# - no memo index can jump: MEMOIZE appends one slot, BINPUT's index is < 256 (a memo of at
#   most 512 slots); LONG_BINPUT, whose 4-byte index sizes the C memo, is not in the grammar;
# - every integer is at most ``max_long_bytes`` (LONG1 lengths beyond it are not in the
#   grammar, LONG4 is checked in Python); every string is bounded (short ones by their 1-byte
#   length, long ones in Python);
# - every tuple holds scalars only (a tuple opcode is accepted only right after the scalar
#   pushes it pops), so hashing a tuple dict key costs its length: no deep key overflows the
#   C stack and no DAG of shared tuples hashes in exponential time;
# - containers: EMPTY_LIST/EMPTY_DICT bytes bound the lists/dicts built from above (a byte
#   count, payload bytes included), and the opcode count is bounded by the file size.
#
# Anything outside the grammar, and any failure after it (the C unpickler refusing, the
# structure walk refusing), goes to the reference ``prescan``, so every rejection keeps its
# precise reason and nothing the reference refuses is ever accepted because of the fast path.
# The nesting depth, cycles and container budget are checked after loading by
# :func:`check_structure` (depth and cycles cannot hurt the C unpickler: it is iterative, and
# CPython frees deep containers without recursion).

_CHUNK = 1 << 20  # bytes the regex matches between deadline checks


def _alternatives(prefix: bytes, max_len: int) -> bytes:
    """``prefix`` + a 1-byte length k + exactly k bytes, for every k <= max_len."""
    alts = [re.escape(bytes([k])) + (b".{%d}" % k if k else b"") for k in range(max_len + 1)]
    return re.escape(prefix) + b"(?:" + b"|".join(alts) + b")"


@functools.lru_cache(maxsize=8)
def _run_pattern(max_long_bytes: int) -> re.Pattern[bytes]:
    scalar = b"|".join(
        [
            b"K.",  # BININT1
            b"M..",  # BININT2
            b"J....",  # BININT
            b"G.{8}",  # BINFLOAT
            b"N|\\\x88|\\\x89|\\)",  # NONE, NEWTRUE, NEWFALSE, EMPTY_TUPLE
            _alternatives(b"\x8a", min(max_long_bytes, 255)),  # LONG1
            _alternatives(b"\x8c", 255),  # SHORT_BINUNICODE
            _alternatives(b"C", 255),  # SHORT_BINBYTES
        ]
    )
    item = b"(?:" + scalar + b")(?:\\\x94|q.)?"  # a scalar, maybe memoized
    # Not a string first: an alternation of 256 lengths costs ~1 us; a string outside a
    # tuple is skipped in Python instead.
    first = b"|".join(
        [
            b"K.", b"M..", b"J....", b"G.{8}", b"N|\\\x88|\\\x89|\\)",
            _alternatives(b"\x8a", min(max_long_bytes, 255)),
        ]
    )  # fmt: skip
    # A tuple opcode only as the suffix of the scalars it pops (backtracking: three items).
    scalars = (
        b"(?:" + first + b")(?:\\\x94|q.)?"
        + b"(?:\\\x85|" + item + b"(?:\\\x86|" + item + b"\\\x87))?"
    )  # fmt: skip
    # Most frequent first: ``re`` skips an alternative whose first byte cannot match at a
    # glance only when it starts with a literal or a class (no lookahead). Each opcode's
    # first byte belongs to one alternative, except MARK, whose longest form is tried first.
    token = b"|".join(
        [
            b"[hq].|j....",  # BINGET, BINPUT (index < 256), LONG_BINGET
            # MEMOIZE, APPENDS, SETITEMS, APPEND, SETITEM, LIST, DICT, EMPTY_LIST,
            # EMPTY_DICT (an unknown BINGET/LONG_BINGET index: the C unpickler refuses)
            b"[\\\x94eusald\\]\\}]",
            b"\\((?:(?:" + item + b")*t)?",  # MARK scalars... TUPLE, or a MARK alone
            scalars,
        ]
    )
    # Possessive: one token after another, never revisited (what an atomic group per
    # token did, ~20% faster).
    return re.compile(b"(?:" + token + b")*+", re.DOTALL)


def _fast_scan(data: Buffer, limits: PickleLimits, deadline: Deadline) -> bool:
    """True when the token grammar above proves ``data`` safe for the C unpickler.

    False means "not proven": the caller runs the reference :func:`prescan`. Linear: the
    regex never backtracks further than one tuple form.
    """
    n = len(data)
    if n > limits.max_opcodes or n < 3 or data[0] != 0x80 or not 2 <= data[1] <= 5:
        return False
    if _count(data, b"]") + _count(data, b"}") > limits.max_containers:
        return False
    run = _run_pattern(limits.max_long_bytes).match
    u32, u64, i32 = _U32, _U64, _I32
    max_str, max_long = limits.max_string_bytes, limits.max_long_bytes
    p = 2
    while True:
        end = min(n, p + _CHUNK)
        p = run(data, p, end).end()  # type: ignore[union-attr]  # ``*`` always matches
        if p == end and end < n:
            deadline.check()
            continue
        if p >= n:
            return False  # no STOP
        op = data[p]
        if op == 0x2E:  # STOP: must be the last byte
            return p == n - 1
        if op == 0x95:  # FRAME: a length-prefixed region; opcodes go on
            if p + 9 > n or u64(data, p + 1)[0] > n - p:
                return False
            p += 9
        elif op == 0x8C or op == 0x43:  # SHORT_BINUNICODE, SHORT_BINBYTES (<= 255 bytes)
            if p + 2 > n:
                return False
            p += 2 + data[p + 1]
        elif op in (0x58, 0x42):  # BINUNICODE, BINBYTES
            if p + 5 > n:
                return False
            k = u32(data, p + 1)[0]
            if k > max_str or p + 5 + k > n:
                return False
            p += 5 + k
        elif op in (0x8D, 0x8E):  # BINUNICODE8, BINBYTES8
            if p + 9 > n:
                return False
            k = u64(data, p + 1)[0]
            if k > max_str or p + 9 + k > n:
                return False
            p += 9 + k
        elif op == 0x8B:  # LONG4
            if p + 5 > n:
                return False
            k = i32(data, p + 1)[0]
            if not 0 <= k <= max_long or p + 5 + k > n:
                return False
            p += 5 + k
        else:  # anything else is not proven: the reference decides
            return False


def _depth_of(items: list[int], pos: int, max_depth: int) -> int:
    depth = 1 + max(items, default=0)
    if depth > max_depth:
        raise _reject(f"pickle data nests deeper than {max_depth} levels at byte {pos}")
    return depth


def _fill(
    stack: list[int], marks: list[int], items: list[int], name: str, pos: int, max_depth: int
) -> None:
    if not stack or (marks and len(stack) == marks[-1]):
        raise _reject(f"pickle opcode {name} at byte {pos} has no container to fill")
    depth = max(stack[-1], _depth_of(items, pos, max_depth))
    stack[-1] = depth


def check_structure(obj: Any, limits: PickleLimits, deadline: Deadline) -> int:
    """Reject cycles, over-deep nesting and too many containers; return the container count.

    Explicit stack, no recursion; each distinct container is visited once however often
    the memo shares it, so a DAG that would expand exponentially costs linear time. Depth
    is checked on every path all the same: each container's height (the levels at and below
    it) is kept when it is done, so a shared container first met by a short path and then
    by a long one adds its height to the long one.
    """
    containers = (list, dict, tuple)
    if type(obj) not in containers:
        return 0
    max_depth = limits.max_depth
    heights: dict[int, int] = {}  # id -> levels at and below a finished container
    on_path: set[int] = {id(obj)}
    # Each frame: the container, an iterator over its children, the tallest child so far.
    path: list[list[Any]] = [[obj, iter(obj.values() if type(obj) is dict else obj), 0]]
    visited = 1
    while path:
        frame = path[-1]
        for child in frame[1]:
            if type(child) not in containers:
                continue
            key = id(child)
            if key in on_path:
                raise _reject(
                    f"pickle data is self-referential: a {type(child).__name__} contains "
                    f"itself {len(path)} level(s) down"
                )
            height = heights.get(key)
            if height is not None:
                if len(path) + height > max_depth:
                    raise _reject(f"pickle data nests deeper than {max_depth} levels")
                frame[2] = max(frame[2], height)
                continue
            visited += 1
            if visited > limits.max_containers:
                raise _reject(f"pickle data holds more than {limits.max_containers:,} containers")
            if not visited & 0xFFFF:
                deadline.check()
            if len(path) >= max_depth:
                raise _reject(f"pickle data nests deeper than {max_depth} levels")
            on_path.add(key)
            path.append([child, iter(child.values() if type(child) is dict else child), 0])
            break
        else:
            path.pop()
            key = id(frame[0])
            on_path.discard(key)
            heights[key] = frame[2] + 1
            if path:
                path[-1][2] = max(path[-1][2], frame[2] + 1)
    return visited


_CONTAINERS = frozenset({list, dict, tuple})
_is_container = _CONTAINERS.__contains__


def _fast_structure(obj: Any, limits: PickleLimits, deadline: Deadline) -> int | None:
    """The container count within the budgets; -1: too deep; None: the reference decides.

    Breadth first, one level at a time, with every per-item step in C (``map``/``compress``
    over ``type``): level k holds the distinct containers at depth k. A cycle never runs out
    of levels, so it ends at the depth limit like an over-deep nesting (-1); the caller runs
    :func:`check_structure`, which names which of the two it was. Sharing is deduplicated
    within a level, so a level never exceeds the distinct containers: at most ``max_depth``
    times linear even for a hostile DAG.
    """
    if type(obj) not in _CONTAINERS:
        return 0
    compress, referents = itertools.compress, gc.get_referents
    seen: dict[int, Any] = {id(obj): obj}
    level: list[Any] = [obj]
    depth = 1
    while True:
        # A dict's referents are its keys and values; a key container is a tuple of scalars
        # or the C unpickler could not have hashed it, so it adds a level only where one is.
        children = referents(*level)
        # Deduplicate first (shared frame dicts: 690k references, 830 objects), then filter.
        distinct = dict(zip(map(id, children), children, strict=True))
        found = list(compress(distinct.values(), map(_is_container, map(type, distinct.values()))))
        if not found:
            return len(seen)
        depth += 1
        if depth > limits.max_depth:
            return -1
        distinct = dict(zip(map(id, found), found, strict=True))
        seen.update(distinct)
        if len(seen) > limits.max_containers:
            return None  # dict keys count here and not in the reference: it decides
        deadline.check()
        level = found


def loads(
    data: Buffer,
    limits: PickleLimits = DEFAULT_PICKLE_LIMITS,
    deadline: Deadline | None = None,
    *,
    walk: bool = True,
) -> Any:
    """Plain data (dict/list/tuple/str/bytes/int/float/bool/None) from untrusted bytes.

    ``walk=False`` skips the structure check after loading (nesting depth, cycles): for a
    caller that reads the result only through a schema walk of its own, fixed in depth and
    bounded in work, which never recurses into what it does not know (``memory_snapshot.
    validate``). Depth and cycles cannot hurt the C unpickler or CPython's freeing of the
    result (see above); everything the unpickler itself needs stays checked before loading.
    The walk costs 2-3x ``pickle.loads`` on real snapshots.

    Fast path: the token grammar (:func:`_fast_scan`), the C unpickler, the breadth-first
    structure check. Whatever the fast path cannot prove, or any failure on it, is decided
    by the reference passes (:func:`prescan`, :func:`check_structure`), so the reasons are
    the reference's and the fast path never accepts what the reference refuses, except that
    it does not simulate the stack: a pickle that leaves extra items under its result, nests
    marks deeper than ``max_marks``, or BINPUTs to a 1-byte index past the memo's end, loads
    (none costs the C unpickler more than the file's size; tests/artifacts/test_safepickle.py
    checks on mutated pickles and opcode soup that nothing else differs).
    """
    deadline = deadline or Deadline(DEFAULT_LIMITS.deadline_s)
    fast = _fast_scan(data, limits, deadline)
    if not fast:
        prescan(data, limits, deadline)
    deadline.check()
    try:
        obj = _DataOnlyUnpickler(_stream(data)).load()
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        # APPENDS/SETITEMS onto a tuple or a string: the stack is not simulated by the fast
        # scan, and the C unpickler calls .append on whatever is there (found by the fuzzer).
        AttributeError,
    ) as exc:
        if fast:
            prescan(data, limits, deadline)  # the reference names the fault, if it sees one
        # Unreachable for data that passed the pre-scan, except e.g. an unhashable dict key.
        raise _reject(f"pickle rejected while loading: {type(exc).__name__}: {exc}") from None
    except (MemoryError, RecursionError) as exc:
        raise _reject(f"pickle too large to load: {type(exc).__name__}") from None
    deadline.check()
    if not walk:
        return obj
    walked = _fast_structure(obj, limits, deadline)
    if walked is None or walked < 0:
        if fast:
            prescan(data, limits, deadline)
        # Exact on every path: what the level walk found too deep (or cyclic) it refuses too.
        check_structure(obj, limits, deadline)
    return obj


def load(
    source: Path | str | BinaryIO,
    limits: Limits = DEFAULT_LIMITS,
    pickle_limits: PickleLimits = DEFAULT_PICKLE_LIMITS,
    deadline: Deadline | None = None,
) -> Any:
    """Map ``source`` via :func:`bounded.mapped` (size, gzip, deadline), then :func:`loads`."""
    deadline = deadline or Deadline(limits.deadline_s)
    with mapped(source, limits, deadline) as data:
        return loads(data, pickle_limits, deadline)
