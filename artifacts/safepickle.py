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

import io
import pickle  # used only through _DataOnlyUnpickler, after the opcode pre-scan
import pickletools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from artifacts.bounded import DEFAULT_LIMITS, Deadline, Limits, read_all
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


def prescan(data: bytes, limits: PickleLimits, deadline: Deadline) -> int:
    """Parse every opcode without building objects; return the opcode count.

    The simulated stack holds one int per item: the nesting depth of the object it stands
    for (0 for scalars). Tuples are immutable, so their depth is exact, and that is what the
    C unpickler hashes recursively when a tuple is a dict key.
    """
    stack: list[int] = []
    marks: list[int] = []
    memo: list[int] = []
    count = 0
    pos = 0
    stopped = False
    max_depth = limits.max_depth
    try:
        for op, arg, pos in pickletools.genops(data):
            count += 1
            if not count & 0xFFFF:
                deadline.check()
                if count > limits.max_opcodes:
                    raise _reject(f"pickle has more than {limits.max_opcodes:,} opcodes")
            name = op.name
            if count == 1:
                if name != "PROTO" or not 2 <= arg <= 5:
                    raise _reject("not a pickle of protocol 2-5 (no PROTO opcode at byte 0)")
                continue
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
                _fill(stack, marks, items, name, pos, max_depth)
            elif name == "APPENDS" or name == "SETITEMS":
                items = _pop_to_mark(stack, marks, name, pos)
                if name == "SETITEMS" and len(items) % 2:
                    raise _reject(f"pickle SETITEMS at byte {pos} has an odd item count")
                _fill(stack, marks, items, name, pos, max_depth)
            elif name in ("TUPLE", "LIST", "DICT"):
                items = _pop_to_mark(stack, marks, name, pos)
                stack.append(_depth_of(items, pos, max_depth))
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                items = _pop(stack, marks, int(name[-1]), name, pos)
                stack.append(_depth_of(items, pos, max_depth))
            elif name == "STOP":
                if len(stack) != 1 or marks:
                    raise _reject(f"pickle STOP at byte {pos} leaves a malformed stack")
                stopped = True
            elif name in _NOOP:
                if name == "FRAME" and arg > len(data) - pos:
                    raise _reject(f"pickle frame at byte {pos} runs past the end of the file")
            else:
                raise _reject(f"pickle opcode {name} at byte {pos} is not allowed (not plain data)")
    except ValueError as exc:
        # genops: unknown opcode, short argument or data that ends before STOP.
        if count == 0:
            raise _reject(f"not a pickle ({exc})") from None
        raise _reject(f"truncated or corrupt pickle after byte {pos}: {exc}") from None
    if not stopped:
        raise _reject("truncated pickle: no STOP opcode")
    if pos + 1 != len(data):
        raise _reject(f"{len(data) - pos - 1:,} unexpected bytes after the pickle's STOP opcode")
    return count


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
    the memo shares it, so a DAG that would expand exponentially costs linear time.
    """
    containers = (list, dict, tuple)
    if type(obj) not in containers:
        return 0
    done: set[int] = set()
    on_path: set[int] = {id(obj)}
    path: list[tuple[Any, Any]] = [(obj, iter(obj.values() if type(obj) is dict else obj))]
    visited = 1
    while path:
        _node, children = path[-1]
        for child in children:
            if type(child) not in containers:
                continue
            key = id(child)
            if key in on_path:
                raise _reject(
                    f"pickle data is self-referential: a {type(child).__name__} contains "
                    f"itself {len(path)} level(s) down"
                )
            if key in done:
                continue
            visited += 1
            if visited > limits.max_containers:
                raise _reject(f"pickle data holds more than {limits.max_containers:,} containers")
            if not visited & 0xFFFF:
                deadline.check()
            if len(path) >= limits.max_depth:
                raise _reject(f"pickle data nests deeper than {limits.max_depth} levels")
            on_path.add(key)
            path.append((child, iter(child.values() if type(child) is dict else child)))
            break
        else:
            path.pop()
            key = id(_node)
            on_path.discard(key)
            done.add(key)
    return visited


def loads(
    data: bytes,
    limits: PickleLimits = DEFAULT_PICKLE_LIMITS,
    deadline: Deadline | None = None,
) -> Any:
    """Plain data (dict/list/tuple/str/bytes/int/float/bool/None) from untrusted bytes."""
    deadline = deadline or Deadline(DEFAULT_LIMITS.deadline_s)
    prescan(data, limits, deadline)
    deadline.check()
    try:
        obj = _DataOnlyUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError, IndexError) as exc:
        # Unreachable for data that passed the pre-scan, except e.g. an unhashable dict key.
        raise _reject(f"pickle rejected while loading: {type(exc).__name__}: {exc}") from None
    except (MemoryError, RecursionError) as exc:
        raise _reject(f"pickle too large to load: {type(exc).__name__}") from None
    deadline.check()
    check_structure(obj, limits, deadline)
    return obj


def load(
    source: Path | str | BinaryIO,
    limits: Limits = DEFAULT_LIMITS,
    pickle_limits: PickleLimits = DEFAULT_PICKLE_LIMITS,
    deadline: Deadline | None = None,
) -> Any:
    """Read ``source`` via :func:`bounded.read_all` (size, gzip, deadline), then :func:`loads`."""
    deadline = deadline or Deadline(limits.deadline_s)
    data = read_all(source, limits, deadline)
    return loads(data, pickle_limits, deadline)
