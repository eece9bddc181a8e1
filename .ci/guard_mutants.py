"""Guard-removal mutants: one per limit and refusal of the security guards (issue 19).

Read by ``.ci/guard-mutants``, which applies each mutant alone to a throwaway copy of the tree
and runs that module's fast, Django-free tests (the runner lists of ``.ci/mutation``). The
question each answers: "if this guard were removed, would a test fail?" A mutant removes or
disables exactly one guard: a default limit raised ~1,000x, a check made to always pass, a
refusal deleted, an allow-list widened, a deadline or limit not handed on to where it is
enforced. ``old`` must occur exactly once in ``file`` (the runner fails loudly otherwise, so
the list cannot silently rot when the code changes); ``new`` replaces it.

``kills`` names the test expected to kill the mutant: the runner tries it first (a single
test instead of the whole list) and, if it does not fail, runs the module's whole list, so a
stale hint costs time, never a wrong verdict. A mutant is counted as killed only when a test
fails on it twice and passes on the unmutated tree.

``equivalent=True`` marks a mutant whose removal cannot change behaviour; ``why`` says why.
The runner still runs it and reports it apart: killed, it is not equivalent after all and the
mark must go.
"""

from __future__ import annotations

from dataclasses import dataclass

PICKLE = "artifacts/safepickle.py"
BOUNDED = "artifacts/bounded.py"
NET = "probes/net.py"

GUARDS = "tests/artifacts/test_safepickle_guards.py"
PICKLES = "tests/artifacts/test_safepickle.py"
BOUNDS = "tests/artifacts/test_bounded.py"
NETS = "tests/probes/test_net.py"
SSRF = "tests/trust/test_ssrf_extra.py"


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    old: str
    new: str
    why: str
    kills: tuple[str, ...] = ()
    equivalent: bool = False


def _m(name, file, old, new, why, kills=(), *, equivalent=False) -> Mutant:
    kills = (kills,) if isinstance(kills, str) else tuple(kills)
    return Mutant(name, file, old, new, why, kills, equivalent)


# One call per mutant, kept compact by hand (ruff's formatter would give each argument a line).
# fmt: off

# --- artifacts/bounded.py: the size, expansion and time bounds every loader reads through ---

_B_DEFAULTS = (
    f"{BOUNDS}::test_the_default_limits_are_the_documented_ones_and_cannot_be_changed_in_place"
)

BOUNDED_MUTANTS = [
    _m("bounded.default.max_file_bytes", BOUNDED,
       "max_file_bytes: int = 512 * MiB", "max_file_bytes: int = 512 * 1000 * MiB",
       "the default compressed-size cap of every upload", _B_DEFAULTS),
    _m("bounded.default.max_expanded_bytes", BOUNDED,
       "max_expanded_bytes: int = 4096 * MiB", "max_expanded_bytes: int = 4096 * 1000 * MiB",
       "the default gzip expansion cap (decompression bombs)", _B_DEFAULTS),
    _m("bounded.default.deadline_s", BOUNDED,
       "deadline_s: float = 300.0", "deadline_s: float = 300_000.0",
       "the default wall-clock budget of one analysis", _B_DEFAULTS),
    _m("bounded.deadline.never-expires", BOUNDED,
       "if time.monotonic() > self.expires:", "if False:",
       "Deadline.check is the one clock every loader polls",
       f"{BOUNDS}::test_an_expired_deadline_says_which_limit"),
    _m("bounded.deadline.length", BOUNDED,
       "self.expires = time.monotonic() + seconds",
       "self.expires = time.monotonic() + seconds + 1e9",
       "a deadline expires after the seconds it was given",
       f"{BOUNDS}::test_an_expired_deadline_says_which_limit"),
    _m("bounded.raw.file-size-check", BOUNDED,
       "if total > limits.max_file_bytes:", "if False:",
       "the compressed-size cap, checked per chunk read",
       f"{BOUNDS}::test_a_file_of_exactly_the_limit_is_read_and_one_byte_more_is_not"),
    _m("bounded.raw.deadline-check", BOUNDED,
       "        deadline.check()\n        yield chunk\n", "        yield chunk\n",
       "the deadline between raw chunks (a slow or huge plain file)",
       f"{BOUNDS}::test_the_deadline_is_checked_between_chunks"),
    _m("bounded.gunzip.expansion-check", BOUNDED,
       "if expanded > limits.max_expanded_bytes:", "if False:",
       "the expansion cap, checked per decompression step (a bomb stops at the cap)",
       f"{BOUNDS}::test_gzip_expanding_to_exactly_the_limit_is_read_and_one_byte_more_is_not"),
    _m("bounded.gunzip.deadline-check", BOUNDED,
       "            deadline.check()\n            if out:\n", "            if out:\n",
       "the deadline between decompression steps: one small compressed chunk can expand for "
       "minutes, and the raw reader checks only once per compressed chunk",
       f"{BOUNDS}::test_the_deadline_is_checked_between_decompression_steps"),
    _m("bounded.gunzip.trailing-bytes-refusal", BOUNDED,
       "if rest[:2] != GZIP_MAGIC:", "if False:",
       "after a gzip member only zero padding or another member is accepted",
       f"{BOUNDS}::test_after_the_gzip_end_only_zero_padding_or_another_member_is_accepted"),
    _m("bounded.gunzip.trailing-bytes-ignored", BOUNDED,
       'if rest.strip(b"\\x00"):', "if False:",
       "bytes after the gzip end are judged, not dropped",
       f"{BOUNDS}::test_truncated_gzip_garbage_after_the_end_and_corrupt_data_are_named"),
    _m("bounded.gunzip.truncation-refusal", BOUNDED,
       "    if not d.eof:\n", "    if False:\n",
       "a gzip stream that ends early is refused, not returned in part",
       f"{BOUNDS}::test_broken_gzip_is_named_for_what_is_wrong"),
    _m("bounded.gunzip.corrupt-refusal", BOUNDED,
       'raise ArtifactRejected(f"corrupt gzip data: {exc}") from None', "raise",
       "corrupt gzip is an ArtifactRejected with a reason, not a zlib.error traceback",
       f"{BOUNDS}::test_broken_gzip_is_named_for_what_is_wrong"),
    _m("bounded.empty-file-refusal", BOUNDED,
       "    if not first:\n", "    if False:\n",
       "an empty upload is refused by name",
       f"{BOUNDS}::test_size_cap_and_empty_file"),
    _m("bounded.stream.default-deadline", BOUNDED,
       "    deadline = deadline or Deadline(limits.deadline_s)\n    if isinstance(",
       "    deadline = deadline or Deadline(1e9)\n    if isinstance(",
       "stream() without a deadline runs under limits.deadline_s",
       f"{BOUNDS}::test_the_deadline_is_checked_between_chunks"),
    _m("bounded.stream.path-limits", BOUNDED,
       "            yield from _stream_fh(fh, limits, deadline)",
       "            yield from _stream_fh(fh, DEFAULT_LIMITS, deadline)",
       "a path (what the upload task passes) is read under the caller's limits",
       f"{BOUNDS}::test_a_path_is_read_under_the_callers_limits_and_deadline"),
    _m("bounded.stream.path-deadline", BOUNDED,
       "            yield from _stream_fh(fh, limits, deadline)",
       "            yield from _stream_fh(fh, limits, Deadline(1e9))",
       "a path is read under the caller's deadline",
       f"{BOUNDS}::test_a_path_is_read_under_the_callers_limits_and_deadline"),
    _m("bounded.stream.file-limits", BOUNDED,
       "        yield from _stream_fh(source, limits, deadline)",
       "        yield from _stream_fh(source, DEFAULT_LIMITS, deadline)",
       "a file object is read under the caller's limits",
       f"{BOUNDS}::test_a_file_of_exactly_the_limit_is_read_and_one_byte_more_is_not"),
    _m("bounded.stream_fh.raw-limits", BOUNDED,
       "chunks = _raw_chunks(fh, limits, deadline)",
       "chunks = _raw_chunks(fh, DEFAULT_LIMITS, deadline)",
       "the raw reader enforces the caller's size cap",
       f"{BOUNDS}::test_a_file_of_exactly_the_limit_is_read_and_one_byte_more_is_not"),
    _m("bounded.stream_fh.raw-deadline", BOUNDED,
       "chunks = _raw_chunks(fh, limits, deadline)",
       "chunks = _raw_chunks(fh, limits, Deadline(1e9))",
       "the raw reader polls the caller's deadline",
       f"{BOUNDS}::test_the_deadline_is_checked_between_chunks"),
    _m("bounded.stream_fh.gunzip-limits", BOUNDED,
       "yield from _gunzip(rejoined(), limits, deadline)",
       "yield from _gunzip(rejoined(), DEFAULT_LIMITS, deadline)",
       "the decompressor enforces the caller's expansion cap",
       f"{BOUNDS}::test_a_decompression_bomb_stops_at_the_cap_not_at_the_end"),
    _m("bounded.stream_fh.gunzip-deadline", BOUNDED,
       "yield from _gunzip(rejoined(), limits, deadline)",
       "yield from _gunzip(rejoined(), limits, Deadline(1e9))",
       "the decompressor polls the caller's deadline",
       f"{BOUNDS}::test_the_deadline_is_checked_between_decompression_steps"),
    _m("bounded.read_all.limits", BOUNDED,
       'return b"".join(stream(source, limits, deadline))',
       'return b"".join(stream(source))',
       "read_all hands its limits and deadline to the stream",
       f"{BOUNDS}::test_a_file_of_exactly_the_limit_is_read_and_one_byte_more_is_not"),
    _m("bounded.mapped.default-deadline", BOUNDED,
       "    deadline = deadline or Deadline(limits.deadline_s)\n    with tempfile",
       "    deadline = deadline or Deadline(1e9)\n    with tempfile",
       "mapped() without a deadline runs under limits.deadline_s",
       f"{BOUNDS}::test_the_map_applies_the_callers_limits"),
    _m("bounded.mapped.limits", BOUNDED,
       "for chunk in stream(source, limits, deadline):",
       "for chunk in stream(source, DEFAULT_LIMITS, deadline):",
       "the pickle loader's map is filled under the caller's size and expansion caps",
       f"{BOUNDS}::test_the_map_applies_the_callers_limits"),
    _m("bounded.mapped.deadline", BOUNDED,
       "for chunk in stream(source, limits, deadline):",
       "for chunk in stream(source, limits):",
       "the map is filled under the caller's deadline",
       f"{BOUNDS}::test_the_map_keeps_the_callers_deadline"),
]


# --- artifacts/safepickle.py: the pickle loader ------------------------------------------------

_P_DEFAULTS = f"{GUARDS}::test_the_default_pickle_limits_are_the_documented_ones"
_P_REFUSALS = f"{GUARDS}::test_each_refusal_of_the_reference_scan_has_its_own_reason"
_P_ENVELOPE = f"{GUARDS}::test_the_envelope_of_a_pickle_is_checked_first_and_last"
_P_LIMITS = f"{GUARDS}::test_each_limit_of_the_reference_scan_admits_exactly_its_value"
_P_RESUME = f"{GUARDS}::test_after_a_long_argument_the_fast_loop_never_reads_past_the_end"

PICKLE_MUTANTS = [
    # The defaults of PickleLimits (shared by every upload).
    _m("pickle.default.max_depth", PICKLE,
       "max_depth: int = 64", "max_depth: int = 64_000",
       "nesting depth of loaded data", _P_DEFAULTS),
    _m("pickle.default.max_stack", PICKLE,
       "max_stack: int = 100_000", "max_stack: int = 100_000_000",
       "items on the unpickler's stack", _P_DEFAULTS),
    _m("pickle.default.max_marks", PICKLE,
       "max_marks: int = 64", "max_marks: int = 64_000",
       "open MARKs at once", _P_DEFAULTS),
    _m("pickle.default.max_string_bytes", PICKLE,
       "max_string_bytes: int = 16 * MiB", "max_string_bytes: int = 16 * 1000 * MiB",
       "one string or bytes payload", _P_DEFAULTS),
    _m("pickle.default.max_long_bytes", PICKLE,
       "max_long_bytes: int = 32", "max_long_bytes: int = 32_000",
       "one integer (int parsing is quadratic)", _P_DEFAULTS),
    _m("pickle.default.max_opcodes", PICKLE,
       "max_opcodes: int = 200_000_000", "max_opcodes: int = 200_000_000_000",
       "opcodes in one pickle", _P_DEFAULTS),
    _m("pickle.default.max_containers", PICKLE,
       "max_containers: int = 50_000_000", "max_containers: int = 50_000_000_000",
       "containers in the loaded data (memory)", _P_DEFAULTS),
    # The second layer: the unpickler never resolves a global or a persistent id.
    _m("pickle.find_class", PICKLE,
       '        raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")',
       "        return super().find_class(module, name)",
       "find_class refuses every global even if the pre-scan had a hole",
       f"{GUARDS}::test_find_class_refuses_every_global_even_when_the_prescan_is_bypassed"),
    _m("pickle.persistent_load", PICKLE,
       '        raise pickle.UnpicklingError("persistent ids are not allowed")',
       "        return pid",
       "persistent ids are refused by the unpickler itself",
       f"{GUARDS}::test_persistent_ids_are_refused_by_the_second_layer"),
    # The reference scan (_step and its helpers): each refusal.
    _m("pickle.step.no-mark", PICKLE,
       "    if not marks:\n        raise _reject(", "    if False:\n        raise _reject(",
       "APPENDS/SETITEMS/TUPLE/LIST/DICT without a MARK", _P_REFUSALS),
    _m("pickle.step.empty-stack", PICKLE,
       "if len(stack) - floor < n:", "if False:",
       "APPEND/SETITEM/TUPLEn popping more than the stack holds above the mark", _P_REFUSALS),
    _m("pickle.step.checkpoint-cadence", PICKLE,
       "    if not count & 0xFFFF:\n        deadline.check()",
       "    if not count & 0xFFFFFFF:\n        deadline.check()",
       "the deadline and opcode budget are looked at every 65,536 opcodes, not every 2**28",
       f"{GUARDS}::test_the_opcode_scan_looks_at_the_clock_once_per_65536_opcodes"),
    _m("pickle.step.deadline-check", PICKLE,
       "        deadline.check()\n        if count > limits.max_opcodes:",
       "        if count > limits.max_opcodes:",
       "the reference scan polls the deadline at each checkpoint",
       f"{GUARDS}::test_the_opcode_scan_checks_the_deadline_as_it_goes"),
    _m("pickle.step.opcode-budget", PICKLE,
       "if count > limits.max_opcodes:", "if False:",
       "max_opcodes", f"{GUARDS}::test_the_opcode_budget_admits_exactly_its_count"),
    _m("pickle.step.proto-first", PICKLE,
       'if name != "PROTO" or not 2 <= arg <= 5:',
       'if name == "PROTO" and not 2 <= arg <= 5:',
       "a pickle starts with PROTO", _P_ENVELOPE),
    _m("pickle.step.protocol-range", PICKLE,
       'if name != "PROTO" or not 2 <= arg <= 5:', 'if name != "PROTO":',
       "protocols 2-5 only", _P_ENVELOPE),
    _m("pickle.step.string-limit", PICKLE,
       "if name in _PAYLOAD and len(arg) > limits.max_string_bytes:", "if False:",
       "max_string_bytes in the reference scan",
       f"{GUARDS}::test_every_string_opcode_is_bounded_by_the_string_limit"),
    _m("pickle.step.long-limit", PICKLE,
       'if name in ("LONG1", "LONG4") and arg.bit_length() > 8 * limits.max_long_bytes:',
       "if False:",
       "max_long_bytes in the reference scan", _P_LIMITS),
    _m("pickle.step.push-stack-limit", PICKLE,
       "        stack.append(1 if name in _CONTAINER_PUSH else 0)\n"
       "        if len(stack) > limits.max_stack:",
       "        stack.append(1 if name in _CONTAINER_PUSH else 0)\n        if False:",
       "max_stack on every push", f"{GUARDS}::test_every_push_counts_against_the_stack_limit"),
    _m("pickle.step.memo-never-stored", PICKLE,
       "if arg >= len(memo):", "if False:",
       "BINGET of a memo slot never stored", _P_REFUSALS),
    _m("pickle.step.memo-get-stack-limit", PICKLE,
       "        stack.append(memo[arg])\n        if len(stack) > limits.max_stack:",
       "        stack.append(memo[arg])\n        if False:",
       "max_stack on BINGET", _P_LIMITS),
    _m("pickle.step.memo-nothing-to-store", PICKLE,
       "        if not stack or (marks and len(stack) == marks[-1]):\n"
       '            raise _reject(f"pickle opcode {name} at byte {pos} has nothing to store")',
       "        if False:\n"
       '            raise _reject(f"pickle opcode {name} at byte {pos} has nothing to store")',
       "MEMOIZE/BINPUT with nothing above the mark", _P_REFUSALS),
    _m("pickle.step.memo-skips-ahead", PICKLE,
       "if index > len(memo):", "if False:",
       "a memo index that jumps (LONG_BINPUT 0xffffffff: a 32 GiB memo in the C unpickler)",
       _P_REFUSALS),
    _m("pickle.step.mark-limit", PICKLE,
       "if len(marks) > limits.max_marks:", "if False:",
       "max_marks in the reference scan", _P_LIMITS),
    _m("pickle.step.setitem-nested-key", PICKLE,
       'if name == "SETITEM" and items[0] > 1:', "if False:",
       "a dict key that nests containers (exponential hashing)", _P_REFUSALS),
    _m("pickle.step.setitems-odd", PICKLE,
       'if name == "SETITEMS" and len(items) % 2:', "if False:",
       "SETITEMS with a key and no value", _P_REFUSALS),
    _m("pickle.step.setitems-nested-key", PICKLE,
       'if name == "SETITEMS" and max(items[0::2], default=0) > 1:', "if False:",
       "a SETITEMS key that nests containers", _P_REFUSALS),
    _m("pickle.step.dict-nested-key", PICKLE,
       'if name == "DICT" and max(items[0::2], default=0) > 1:', "if False:",
       "a DICT key that nests containers", _P_REFUSALS),
    _m("pickle.step.stop-malformed-stack", PICKLE,
       "if len(stack) != 1 or marks:", "if False:",
       "STOP with more or less than one item, or an open MARK", _P_ENVELOPE),
    _m("pickle.step.frame-past-end", PICKLE,
       'if name == "FRAME" and arg > len(data) - pos:', "if False:",
       "a FRAME longer than the file", _P_ENVELOPE),
    _m("pickle.step.not-allowed", PICKLE,
       '        raise _reject(f"pickle opcode {name} at byte {pos} is not allowed '
       '(not plain data)")',
       "        pass",
       "every opcode outside the data whitelist (GLOBAL, REDUCE, BUILD, ...) is refused by name",
       f"{PICKLES}::test_every_non_data_opcode_is_refused_by_name"),
    _m("pickle.whitelist.widened", PICKLE,
       '_NOOP = frozenset({"PROTO", "FRAME", "MEMOIZE", "BINPUT", "LONG_BINPUT"})',
       '_NOOP = frozenset({"PROTO", "FRAME", "MEMOIZE", "BINPUT", "LONG_BINPUT", "GLOBAL",'
       ' "STACK_GLOBAL", "REDUCE", "BUILD"})',
       "the whitelist of data opcodes (code-running opcodes let through as no-ops)",
       f"{PICKLES}::test_os_system_reference_is_refused"),
    _m("pickle.step.depth-limit", PICKLE,
       "    if depth > max_depth:\n", "    if False:\n",
       "max_depth in the reference scan (TUPLE/LIST/DICT and the filled container)",
       _P_REFUSALS),
    _m("pickle.step.no-container-to-fill", PICKLE,
       "    if not stack or (marks and len(stack) == marks[-1]):\n"
       '        raise _reject(f"pickle opcode {name} at byte {pos} has no container to fill")',
       "    if False:\n"
       '        raise _reject(f"pickle opcode {name} at byte {pos} has no container to fill")',
       "APPEND/APPENDS/SETITEM/SETITEMS with nothing (or a MARK) to fill", _P_REFUSALS),
    # The fast loop of prescan: each condition on which it hands an opcode to _step.
    _m("pickle.fastloop.stack-bound", PICKLE,
       "chunk = min(max_stack - len(stack), 0xFFFF - (count & 0xFFFF), (n - p) // 9)",
       "chunk = min(1 << 62, 0xFFFF - (count & 0xFFFF), (n - p) // 9)",
       "max_stack in the fast loop (its runs end where the stack could overflow)",
       f"{GUARDS}::test_every_push_counts_against_the_stack_limit"),
    _m("pickle.fastloop.checkpoint-bound", PICKLE,
       "chunk = min(max_stack - len(stack), 0xFFFF - (count & 0xFFFF), (n - p) // 9)",
       "chunk = min(max_stack - len(stack), 1 << 62, (n - p) // 9)",
       "the fast loop's runs end at each deadline/opcode-budget checkpoint",
       f"{GUARDS}::test_the_opcode_scan_looks_at_the_clock_once_per_65536_opcodes"),
    _m("pickle.fastloop.end-bound", PICKLE,
       "chunk = min(max_stack - len(stack), 0xFFFF - (count & 0xFFFF), (n - p) // 9)",
       "chunk = min(max_stack - len(stack), 0xFFFF - (count & 0xFFFF), n)",
       "the fast loop never reads a fixed-size argument past the end of the file",
       f"{GUARDS}::test_a_fixed_size_argument_cut_short_by_the_end_of_the_file_is_a_truncation"),
    _m("pickle.fastloop.memoize-above-mark", PICKLE,
       "                            if marks and marks[-1] == len(stack):\n"
       "                                break\n                            memo.append(stack[-1])",
       "                            if False:\n"
       "                                break\n                            memo.append(stack[-1])",
       "MEMOIZE with nothing above the mark, in the fast loop", _P_REFUSALS),
    _m("pickle.fastloop.mark-limit", PICKLE,
       "if len(marks) >= max_marks:", "if False:",
       "max_marks in the fast loop", _P_REFUSALS),
    _m("pickle.fastloop.setitems-odd", PICKLE,
       "(op == 117 and (k & 1 or (k and max(stack[start::2]) > 1)))",
       "(op == 117 and (k and max(stack[start::2]) > 1))",
       "SETITEMS with an odd item count, in the fast loop", _P_REFUSALS),
    _m("pickle.fastloop.setitems-nested-key", PICKLE,
       "(op == 117 and (k & 1 or (k and max(stack[start::2]) > 1)))",
       "(op == 117 and k & 1)",
       "a SETITEMS key that nests containers, in the fast loop", _P_REFUSALS),
    _m("pickle.fastloop.appends-no-container", PICKLE,
       "                                or not start\n"
       "                                or (len(marks) > 1 and marks[-2] == start)\n",
       "                                or (len(marks) > 1 and marks[-2] == start)\n",
       # Equivalent: with the mark at the bottom, the run goes on to `del stack[start:]`,
       # empties the stack and raises IndexError on `stack[-1]`; the except hands the opcode
       # to _step, which finds no container below the mark and refuses it with the same
       # reason at the same byte (an odd count or a nested key broke out earlier).
       "APPENDS/SETITEMS whose mark is at the bottom of the stack (nothing to fill): the "
       "IndexError the run then meets hands it to the reference, which refuses it for the same "
       "reason at the same byte",
       _P_REFUSALS, equivalent=True),
    _m("pickle.fastloop.appends-onto-mark", PICKLE,
       "                                or not start\n"
       "                                or (len(marks) > 1 and marks[-2] == start)\n",
       "                                or not start\n",
       "APPENDS/SETITEMS whose container slot is another MARK", _P_REFUSALS),
    _m("pickle.fastloop.appends-depth", PICKLE,
       "                                d = 1 + max(stack[start:])\n"
       "                                if d > max_depth:",
       "                                d = 1 + max(stack[start:])\n"
       "                                if False:",
       "max_depth on APPENDS/SETITEMS, in the fast loop", _P_REFUSALS),
    _m("pickle.fastloop.long1-limit", PICKLE,
       "                                k > max_long\n"
       "                                and int.from_bytes(\n"
       "                                    data[p + 2 : e]",
       "                                False\n"
       "                                and int.from_bytes(\n"
       "                                    data[p + 2 : e]",
       "max_long_bytes on LONG1, in the fast loop",
       f"{GUARDS}::test_integers_are_bounded_at_32_bytes_by_default"),
    _m("pickle.fastloop.unicode-limit", PICKLE,
       'if e > n or len(str(data[b:e], "utf-8", "surrogatepass")) > max_str:',
       'if e > n or len(str(data[b:e], "utf-8", "surrogatepass")) > 1 << 62:',
       "max_string_bytes on the unicode opcodes, in the fast loop",
       f"{GUARDS}::test_every_string_opcode_is_bounded_by_the_string_limit"),
    _m("pickle.fastloop.bytes-limit", PICKLE,
       "if e > n or k > max_str:", "if e > n:",
       "max_string_bytes on the bytes opcodes, in the fast loop",
       f"{GUARDS}::test_every_string_opcode_is_bounded_by_the_string_limit"),
    _m("pickle.fastloop.long4-negative-length", PICKLE,
       "                                k < 0\n                                or e > n\n",
       "                                e > n\n",
       "a LONG4 with a negative length (the loop would step backwards)",
       f"{GUARDS}::test_a_negative_long4_length_is_corrupt_wherever_it_is"),
    _m("pickle.fastloop.long4-limit", PICKLE,
       "                                    k > max_long\n"
       "                                    and int.from_bytes(\n"
       "                                        data[p + 5 : e]",
       "                                    False\n"
       "                                    and int.from_bytes(\n"
       "                                        data[p + 5 : e]",
       "max_long_bytes on LONG4, in the fast loop", _P_REFUSALS),
    _m("pickle.fastloop.resume-after-long1", PICKLE,
       "                            if e + 9 * (limit - count - 1) > n:\n"
       "                                resume = True\n                                break\n"
       "                        elif op == 75:",
       "                            if False:\n"
       "                                resume = True\n                                break\n"
       "                        elif op == 75:",
       "after a LONG1 the run is cut where the remaining opcodes could read past the end",
       _P_RESUME),
    _m("pickle.fastloop.resume-after-unicode", PICKLE,
       "                            if e + 9 * (limit - count - 1) > n:\n"
       "                                resume = True\n                                break\n"
       "                        elif op == 67 or",
       "                            if False:\n"
       "                                resume = True\n                                break\n"
       "                        elif op == 67 or",
       "after a string the run is cut where the remaining opcodes could read past the end",
       _P_RESUME),
    _m("pickle.fastloop.resume-after-bytes", PICKLE,
       "                            if e + 9 * (limit - count - 1) > n:\n"
       "                                resume = True\n                                break\n"
       "                        elif op == 139:",
       "                            if False:\n"
       "                                resume = True\n                                break\n"
       "                        elif op == 139:",
       "after a bytes payload the run is cut where the remaining opcodes could read past the end",
       _P_RESUME),
    _m("pickle.fastloop.resume-after-long4", PICKLE,
       "                            if e + 9 * (limit - count - 1) > n:\n"
       "                                resume = True\n                                break\n"
       "                        elif op == 97 or",
       "                            if False:\n"
       "                                resume = True\n                                break\n"
       "                        elif op == 97 or",
       "after a LONG4 the run is cut where the remaining opcodes could read past the end",
       _P_RESUME),
    _m("pickle.fastloop.append-empty-stack", PICKLE,
       "                            k = 2 if op == 97 else 3\n"
       "                            if len(stack) - (marks[-1] if marks else 0) < k:",
       "                            k = 2 if op == 97 else 3\n"
       "                            if False:",
       "APPEND/SETITEM popping past the mark, in the fast loop", _P_REFUSALS),
    _m("pickle.fastloop.setitem-nested-key", PICKLE,
       "if k == 3 and stack[-2] > 1:", "if False:",
       "a SETITEM key that nests containers, in the fast loop", _P_REFUSALS),
    _m("pickle.fastloop.append-depth", PICKLE,
       "                            d = 1 + (stack[-1] if k == 2 else max(stack[-1], stack[-2]))\n"
       "                            if d > max_depth:",
       "                            d = 1 + (stack[-1] if k == 2 else max(stack[-1], stack[-2]))\n"
       "                            if False:",
       "max_depth on APPEND/SETITEM, in the fast loop", _P_REFUSALS),
    _m("pickle.fastloop.tuplen-empty-stack", PICKLE,
       "                            k = op - 132\n"
       "                            if len(stack) - (marks[-1] if marks else 0) < k:",
       "                            k = op - 132\n                            if False:",
       "TUPLE1-3 popping past the mark, in the fast loop", _P_REFUSALS),
    _m("pickle.fastloop.tuplen-depth", PICKLE,
       "                            d = 1 + max(stack[-k:])\n"
       "                            if d > max_depth:",
       "                            d = 1 + max(stack[-k:])\n                            if False:",
       "max_depth on TUPLE1-3, in the fast loop", _P_REFUSALS),
    _m("pickle.fastloop.dict-nested-key", PICKLE,
       "if op == 100 and max(stack[start::2], default=0) > 1:", "if False:",
       "a DICT key that nests containers, in the fast loop", _P_REFUSALS),
    _m("pickle.fastloop.tuple-list-dict-depth", PICKLE,
       "                            d = 1 + max(stack[start:], default=0)\n"
       "                            if d > max_depth:",
       "                            d = 1 + max(stack[start:], default=0)\n"
       "                            if False:",
       "max_depth on TUPLE/LIST/DICT, in the fast loop", _P_REFUSALS),
    _m("pickle.fastloop.binput-nothing-to-store", PICKLE,
       "if not stack or (marks and marks[-1] == len(stack)) or k > len(memo):",
       "if k > len(memo):",
       "BINPUT with nothing above the mark, in the fast loop", _P_REFUSALS),
    _m("pickle.fastloop.binput-skips-ahead", PICKLE,
       "if not stack or (marks and marks[-1] == len(stack)) or k > len(memo):",
       "if not stack or (marks and marks[-1] == len(stack)):",
       # Equivalent: `memo[k] = stack[-1]` with k > len(memo) raises IndexError before
       # anything changed, and the except hands the opcode to _step, which refuses it.
       "a BINPUT/LONG_BINPUT index that jumps, in the fast loop: `memo[k] = ...` past the "
       "end raises IndexError before any state changed, which hands it to the reference "
       "(the same 'skips ahead' refusal)",
       _P_REFUSALS, equivalent=True),
    _m("pickle.fastloop.frame-past-end", PICKLE,
       "if u64(data, p + 1)[0] > n - p:", "if False:",
       "a FRAME longer than the file, in the fast loop", _P_ENVELOPE),
    _m("pickle.fastloop.hands-over-refused-opcodes", PICKLE,
       "                        else:  # STOP, a refused or unknown opcode: "
       "the reference decides\n",
       "                        elif op != 46:  # a refused or unknown opcode: skipped\n"
       "                            pos = p\n                            p += 1\n"
       "                        else:  # STOP, a refused or unknown opcode: "
       "the reference decides\n",
       "every opcode the fast loop does not know goes to the reference step, which refuses it",
       _P_REFUSALS),
    _m("pickle.fastloop.index-errors-handed-over", PICKLE,
       "except (IndexError, UnicodeDecodeError):", "except UnicodeDecodeError:",
       "no MARK, an unknown memo index or an empty stack in the fast loop go to the reference",
       _P_REFUSALS),
    # prescan's envelope.
    _m("pickle.prescan.no-stop", PICKLE,
       "    if not stopped:\n", "    if False:\n",
       "the loop `while not stopped` ends normally only once STOP was scanned; every other way "
       "out is an exception (ValueError for data that ends before STOP), so the check after it "
       "can never fire: a missing STOP is refused as 'truncated or corrupt pickle ... pickle "
       "exhausted before seeing STOP' with or without it",
       f"{PICKLES}::test_truncated_not_a_pickle_json_and_trailing_garbage", equivalent=True),
    _m("pickle.prescan.bytes-after-stop", PICKLE,
       "if pos + 1 != len(data):", "if False:",
       "nothing may follow STOP", _P_ENVELOPE),
    _m("pickle.prescan.corrupt-is-a-rejection", PICKLE,
       "    except ValueError as exc:\n        # An unknown opcode",
       "    except ZeroDivisionError as exc:\n        # An unknown opcode",
       "unknown opcodes, cut arguments and data without STOP are ArtifactRejected", _P_ENVELOPE),
    # The fast path (token grammar).
    _m("pickle.fastscan.opcode-bound", PICKLE,
       "if n > limits.max_opcodes or n < 3", "if n < 3",
       "the fast path counts no opcodes: it proves only files no longer than max_opcodes bytes",
       f"{GUARDS}::test_the_opcode_budget_holds_on_the_fast_path"),
    _m("pickle.fastscan.proto-byte", PICKLE,
       "or data[0] != 0x80 or", "or",
       "the fast path proves only pickles that start with PROTO",
       f"{GUARDS}::test_loads_checks_the_envelope_as_the_scan_does"),
    _m("pickle.fastscan.protocol-range", PICKLE,
       "or data[0] != 0x80 or not 2 <= data[1] <= 5:", "or data[0] != 0x80:",
       "the fast path proves only protocols 2-5",
       f"{GUARDS}::test_loads_checks_the_envelope_as_the_scan_does"),
    _m("pickle.fastscan.container-precount", PICKLE,
       'if _count(data, b"]") + _count(data, b"}") > limits.max_containers:', "if False:",
       "the C unpickler never builds more lists/dicts than the budget before the walk counts",
       f"{GUARDS}::test_container_bytes_are_counted_in_a_map_as_in_bytes"),
    _m("pickle.grammar.long1-item", PICKLE,
       '_alternatives(b"\\x8a", min(max_long_bytes, 255)),  # LONG1',
       '_alternatives(b"\\x8a", 255),  # LONG1',
       "max_long_bytes in the grammar, for the items of a tuple",
       f"{GUARDS}::test_integers_inside_tuples_are_bounded_too"),
    _m("pickle.grammar.long1-first", PICKLE,
       '_alternatives(b"\\x8a", min(max_long_bytes, 255)),\n        ]',
       '_alternatives(b"\\x8a", 255),\n        ]',
       "max_long_bytes in the grammar, for a scalar token",
       f"{GUARDS}::test_integers_are_bounded_at_32_bytes_by_default"),
    _m("pickle.grammar.nested-tuples", PICKLE,
       'b"[\\\\\\x94eusald\\\\]\\\\}]",',
       'b"[\\\\\\x94eusald\\\\]\\\\}\\\\\\x85\\\\\\x86\\\\\\x87]",',
       "the grammar admits TUPLE1-3 only right after the scalars they pop (no nested key "
       "reaches the C unpickler's hash)",
       f"{GUARDS}::test_nested_tuple_keys_never_reach_the_unpickler"),
    _m("pickle.grammar.tuple-of-anything", PICKLE,
       'b"[\\\\\\x94eusald\\\\]\\\\}]",',
       'b"[\\\\\\x94eusald\\\\]\\\\}t]",',
       "the grammar admits TUPLE only after a MARK and scalars",
       f"{GUARDS}::test_nested_tuple_keys_never_reach_the_unpickler"),
    _m("pickle.grammar.long-binput", PICKLE,
       'b"[hq].|j....",', 'b"[hq].|j....|r....",',
       "LONG_BINPUT (a 4-byte memo index that sizes the C memo) is not in the grammar",
       f"{PICKLES}::test_huge_string_and_memo_index_are_refused"),
    _m("pickle.fastscan.long4-limit", PICKLE,
       "if not 0 <= k <= max_long or p + 5 + k > n:", "if not 0 <= k or p + 5 + k > n:",
       "max_long_bytes on LONG4, on the fast path",
       f"{PICKLES}::test_the_fast_path_hands_every_hazard_to_the_reference"),
    _m("pickle.fastscan.string-limit", PICKLE,
       "if k > max_str or p + 5 + k > n:", "if p + 5 + k > n:",
       "max_string_bytes on BINUNICODE/BINBYTES, on the fast path",
       f"{GUARDS}::test_every_string_opcode_is_bounded_by_the_string_limit"),
    _m("pickle.fastscan.string8-limit", PICKLE,
       "if k > max_str or p + 9 + k > n:", "if p + 9 + k > n:",
       "max_string_bytes on BINUNICODE8/BINBYTES8, on the fast path",
       f"{GUARDS}::test_every_string_opcode_is_bounded_by_the_string_limit"),
    _m("pickle.fastscan.stop-is-last", PICKLE,
       "return p == n - 1", "return True",
       "the fast path proves nothing with bytes after STOP",
       f"{PICKLES}::test_the_fast_path_hands_every_hazard_to_the_reference"),
    _m("pickle.fastscan.frame-length", PICKLE,
       "if p + 9 > n or u64(data, p + 1)[0] > n - p:", "if p + 9 > n:",
       "a FRAME longer than the file leaves the fast path",
       f"{PICKLES}::test_huge_frame_and_string_lengths_leave_the_fast_path"),
    _m("pickle.fastscan.deadline-check", PICKLE,
       "        if p == end and end < n:\n            deadline.check()\n",
       "        if p == end and end < n:\n",
       "the grammar polls the deadline every MiB",
       f"{GUARDS}::test_the_fast_path_checks_the_deadline_every_mib"),
    _m("pickle.fastscan.deadline-cadence", PICKLE,
       "_CHUNK = 1 << 20", "_CHUNK = 1 << 40",
       "the grammar's deadline cadence is a MiB, not a TiB",
       f"{GUARDS}::test_the_fast_path_checks_the_deadline_every_mib"),
    # The walks after loading.
    _m("pickle.levelwalk.depth", PICKLE,
       "        if depth > limits.max_depth:\n            return -1",
       "        if False:\n            return -1",
       "the level walk stops at max_depth (deep nesting, cycles)",
       f"{PICKLES}::test_deep_nesting_through_the_memo_with_a_flat_stack_is_refused"),
    _m("pickle.levelwalk.container-budget", PICKLE,
       "        if len(seen) > limits.max_containers:\n            return None",
       "        if False:\n            return None",
       "the level walk hands an over-budget result to the reference walk",
       f"{GUARDS}::test_the_container_budget_is_enforced_at_its_boundary"),
    _m("pickle.levelwalk.deadline-check", PICKLE,
       "        deadline.check()\n        level = found", "        level = found",
       "the level walk polls the deadline at every level",
       f"{GUARDS}::test_the_level_walk_checks_the_deadline_at_every_level"),
    _m("pickle.walk.cycle", PICKLE,
       "if key in on_path:", "if False:",
       "a container that contains itself",
       f"{PICKLES}::test_self_reference_and_shared_dag"),
    _m("pickle.walk.container-budget", PICKLE,
       "if visited > limits.max_containers:", "if False:",
       "max_containers in the reference walk",
       f"{GUARDS}::test_the_container_budget_is_enforced_at_its_boundary"),
    _m("pickle.walk.deadline-cadence", PICKLE,
       "if not visited & 0xFFFF:", "if not visited & 0xFFFFFFF:",
       "the reference walk polls the deadline every 65,536 containers",
       f"{GUARDS}::test_the_structure_walk_checks_the_deadline_as_it_goes"),
    _m("pickle.walk.depth", PICKLE,
       "if len(path) >= limits.max_depth:", "if False:",
       "max_depth in the reference walk, the only depth check when the level walk gave up "
       "over its budget",
       f"{GUARDS}::test_depth_is_checked_when_the_level_walk_leaves_the_result_to_the_reference"),
    # loads and load.
    _m("pickle.loads.prescan-when-unproven", PICKLE,
       "    if not fast:\n        prescan(data, limits, deadline)",
       "    if False:\n        prescan(data, limits, deadline)",
       "whatever the grammar cannot prove is pre-scanned before the C unpickler sees it",
       f"{PICKLES}::test_os_system_reference_is_refused"),
    _m("pickle.loads.deadline-before-unpickling", PICKLE,
       "        prescan(data, limits, deadline)\n    deadline.check()\n    try:",
       "        prescan(data, limits, deadline)\n    try:",
       "the deadline is checked before the C unpickler, which cannot be interrupted",
       f"{GUARDS}::test_an_expired_deadline_stops_before_the_unpickler_runs"),
    _m("pickle.loads.load-error-is-a-rejection", PICKLE,
       'raise _reject(f"pickle rejected while loading: {type(exc).__name__}: {exc}") from None',
       "raise",
       "whatever the C unpickler refuses is an ArtifactRejected",
       f"{GUARDS}::test_appending_onto_a_non_container_is_a_rejection_not_a_crash"),
    _m("pickle.loads.attribute-error", PICKLE,
       "        AttributeError,\n    ) as exc:", "    ) as exc:",
       "APPENDS onto a tuple or string is an ArtifactRejected",
       f"{GUARDS}::test_appending_onto_a_non_container_is_a_rejection_not_a_crash"),
    _m("pickle.loads.too-large", PICKLE,
       'raise _reject(f"pickle too large to load: {type(exc).__name__}") from None', "raise",
       "MemoryError/RecursionError while loading is an ArtifactRejected",
       f"{GUARDS}::test_running_out_of_memory_while_loading_is_a_rejection"),
    _m("pickle.loads.deadline-after-unpickling", PICKLE,
       "    deadline.check()\n    if not walk:", "    if not walk:",
       "the deadline is checked after the C unpickler, before the result is used",
       f"{GUARDS}::test_the_deadline_is_checked_again_after_the_unpickler"),
    _m("pickle.loads.walk-depth-escalation", PICKLE,
       "if walked is None or walked < 0:", "if walked is None:",
       "a result the level walk finds too deep (or cyclic) goes to the reference",
       f"{PICKLES}::test_deep_nesting_through_the_memo_with_a_flat_stack_is_refused"),
    _m("pickle.loads.walk-budget-escalation", PICKLE,
       "if walked is None or walked < 0:", "if walked is not None and walked < 0:",
       "a result over the level walk's budget goes to the reference",
       f"{GUARDS}::test_the_container_budget_is_enforced_at_its_boundary"),
    _m("pickle.loads.shared-deeper-path", PICKLE,
       "        if walked is not None:\n            # The walk visits",
       "        if False:\n            # The walk visits",
       "a shared container reached again by a longer path is too deep, though the reference "
       "walk met it first by a short one",
       f"{GUARDS}::test_a_shared_container_reached_by_a_longer_path_is_too_deep"),
    _m("pickle.loads.default-deadline", PICKLE,
       "deadline = deadline or Deadline(DEFAULT_LIMITS.deadline_s)",
       "deadline = deadline or Deadline(1e9)",
       "loads without a deadline runs under the default artifact deadline",
       f"{GUARDS}::test_loads_and_load_without_a_deadline_run_under_the_default_one"),
    _m("pickle.load.default-deadline", PICKLE,
       "    deadline = deadline or Deadline(limits.deadline_s)\n    with mapped(",
       "    deadline = deadline or Deadline(1e9)\n    with mapped(",
       "load without a deadline runs under limits.deadline_s",
       f"{GUARDS}::test_loads_and_load_without_a_deadline_run_under_the_default_one"),
    _m("pickle.load.limits", PICKLE,
       "with mapped(source, limits, deadline) as data:",
       "with mapped(source, DEFAULT_LIMITS, deadline) as data:",
       "load reads the file under the caller's size caps",
       f"{GUARDS}::test_load_hands_its_limits_and_deadline_to_each_pass"),
    _m("pickle.load.pickle-limits", PICKLE,
       "return loads(data, pickle_limits, deadline)",
       "return loads(data, DEFAULT_PICKLE_LIMITS, deadline)",
       "load scans under the caller's pickle limits",
       f"{GUARDS}::test_load_hands_its_limits_and_deadline_to_each_pass"),
    _m("pickle.load.deadline", PICKLE,
       "return loads(data, pickle_limits, deadline)",
       "return loads(data, pickle_limits)",
       "load's passes share one deadline (reading the file spends from it)",
       f"{GUARDS}::test_load_hands_its_limits_and_deadline_to_each_pass"),
]


# --- probes/net.py: the outbound network guard ------------------------------------------------

_N_BLOCKED = f"{NETS}::test_every_providers_metadata_endpoint_is_always_blocked"
_N_NEVER = (
    f"{SSRF}::test_a_name_resolving_to_link_local_unspecified_or_multicast_is_blocked_everywhere"
)
_N_RANGES = f"{NETS}::test_multicast_reserved_and_broadcast_addresses_are_never_targets"
_N_NAMES = f"{NETS}::test_every_metadata_name_is_refused_by_name_at_registration_and_at_connection"
_N_REDIRECTS = f"{SSRF}::test_redirect_chains_never_leave_the_origin"
_N_NEVER_URLS = f"{NETS}::test_urls_that_can_never_be_targets_fail_before_connecting"
_N_DEFAULTS = f"{NETS}::test_the_default_fetch_policy_is_the_documented_one_and_frozen"


def _blocked(net: str, comment: str = "") -> str:
    return f'        "{net}",{comment}\n'


NET_MUTANTS = [
    _m("net.blocked.0.0.0.0/8", NET, _blocked("0.0.0.0/8"), "",
       "'this network' (0.0.0.0 reaches local services)", _N_NEVER),
    _m("net.blocked.169.254.0.0/16", NET, _blocked("169.254.0.0/16"), "",
       "IPv4 link-local: the metadata service of AWS, GCP, Azure IMDS, ...", _N_BLOCKED),
    _m("net.blocked.alibaba-metadata", NET,
       _blocked("100.100.100.200/32", "  # Alibaba Cloud metadata"), "",
       "Alibaba Cloud metadata", _N_BLOCKED),
    _m("net.blocked.azure-wire-server", NET,
       _blocked("168.63.129.16/32", "  # Azure wire server"), "",
       "Azure wire server", _N_BLOCKED),
    _m("net.blocked.224.0.0.0/4", NET, _blocked("224.0.0.0/4"), "",
       "IPv4 multicast", _N_RANGES),
    _m("net.blocked.240.0.0.0/4", NET, _blocked("240.0.0.0/4"), "",
       "IPv4 reserved and broadcast", _N_RANGES),
    _m("net.blocked.::/128", NET, _blocked("::/128"), "",
       "the IPv6 unspecified address", _N_NEVER),
    _m("net.blocked.fe80::/10", NET, _blocked("fe80::/10"), "",
       "IPv6 link-local", _N_NEVER),
    _m("net.blocked.aws-metadata-v6", NET,
       _blocked("fd00:ec2::254/128", "  # AWS metadata over IPv6"), "",
       "AWS metadata over IPv6", _N_BLOCKED),
    _m("net.blocked.ff00::/8", NET, _blocked("ff00::/8"), "",
       "IPv6 multicast", _N_NEVER),
    _m("net.default-allowed.ipv4", NET,
       'ipaddress.ip_network("127.0.0.0/8"),', 'ipaddress.ip_network("0.0.0.0/0"),',
       "by default only loopback is a target",
       f"{NETS}::test_an_address_literal_is_judged_at_registration_without_a_resolver"),
    _m("net.default-allowed.ipv6", NET,
       'ipaddress.ip_network("::1/128"),', 'ipaddress.ip_network("::/0"),',
       "by default only loopback is a target (IPv6)",
       f"{NETS}::test_by_default_only_loopback_is_allowed"),
    _m("net.schemes", NET,
       'ALLOWED_SCHEMES = ("http", "https")',
       'ALLOWED_SCHEMES = ("http", "https", "ftp", "file", "gopher")',
       "http and https only", _N_NEVER_URLS),
    _m("net.kept-headers", NET,
       "return {name: response.headers[name][:200] for name in KEPT_HEADERS if name in "
       "response.headers}",
       "return {name: value[:200] for name, value in response.headers.items()}",
       "only the headers a probe uses are kept (no cookies, no server internals)",
       f"{NETS}::test_only_the_kept_headers_survive_and_each_is_cut_at_200_characters"),
    _m("net.kept-header-length", NET,
       "return {name: response.headers[name][:200] for name in KEPT_HEADERS if name in "
       "response.headers}",
       "return {name: response.headers[name] for name in KEPT_HEADERS if name in "
       "response.headers}",
       "a kept header is cut at 200 characters",
       f"{NETS}::test_only_the_kept_headers_survive_and_each_is_cut_at_200_characters"),
    _m("net.default.connect_timeout", NET,
       "connect_timeout: float = 2.0", "connect_timeout: float = 2000.0",
       "default connect timeout", _N_DEFAULTS),
    _m("net.default.read_timeout", NET,
       "read_timeout: float = 5.0", "read_timeout: float = 5000.0",
       "default per-read timeout", _N_DEFAULTS),
    _m("net.default.total_timeout", NET,
       "total_timeout: float = 8.0", "total_timeout: float = 8000.0",
       "default overall deadline", _N_DEFAULTS),
    _m("net.default.max_bytes", NET,
       "max_bytes: int = 8 * 1024 * 1024", "max_bytes: int = 8 * 1024 * 1024 * 1000",
       "default body cap", _N_DEFAULTS),
    _m("net.default.max_redirects", NET,
       "max_redirects: int = 3", "max_redirects: int = 3000",
       "default redirect cap", _N_DEFAULTS),
    # check_address and the IPv4 an IPv6 address stands for.
    _m("net.embeds.nat64", NET,
       '("64:ff9b::/96", "::ffff:0:0:0/96", "::/96")', '("::ffff:0:0:0/96", "::/96")',
       "NAT64's well-known prefix is judged as the IPv4 address it routes to",
       f"{SSRF}::test_ipv6_forms_that_embed_the_metadata_address_are_blocked_everywhere"),
    _m("net.embeds.siit", NET,
       '("64:ff9b::/96", "::ffff:0:0:0/96", "::/96")', '("64:ff9b::/96", "::/96")',
       "SIIT's IPv4-translated form is judged as its IPv4 address",
       f"{SSRF}::test_ipv6_forms_that_embed_the_metadata_address_are_blocked_everywhere"),
    _m("net.embeds.ipv4-compatible", NET,
       '("64:ff9b::/96", "::ffff:0:0:0/96", "::/96")', '("64:ff9b::/96", "::ffff:0:0:0/96")',
       "the IPv4-compatible form is judged as its IPv4 address",
       f"{SSRF}::test_ipv6_forms_that_embed_the_metadata_address_are_blocked_everywhere"),
    _m("net.normalise.mapped", NET,
       "        if address.ipv4_mapped is not None:\n            return address.ipv4_mapped\n",
       "",
       "an IPv4-mapped IPv6 address is judged as its IPv4 address",
       f"{NETS}::test_metadata_and_link_local_are_blocked_even_when_everything_is_allowed"),
    _m("net.normalise.6to4", NET,
       "        if address.sixtofour is not None:\n            return address.sixtofour\n",
       "",
       "a 6to4 address is judged as its IPv4 address",
       f"{SSRF}::test_ipv6_forms_that_embed_the_metadata_address_are_blocked_everywhere"),
    _m("net.normalise.embedded", NET,
       "if int(address) > 1 and any(address in net for net in _EMBEDS_IPV4):",
       "if False:",
       "NAT64/SIIT/IPv4-compatible addresses are judged as their IPv4 address",
       f"{SSRF}::test_ipv6_forms_that_embed_the_metadata_address_are_blocked_everywhere"),
    _m("net.check.scope-id", NET,
       'address = _normalise(ipaddress.ip_address(raw.split("%", 1)[0]))',
       "address = _normalise(ipaddress.ip_address(raw))",
       "a zone is cut so the address checked is the address connected to",
       f"{NETS}::test_a_scope_id_is_dropped_so_the_address_checked_is_the_address_connected_to"),
    _m("net.check.not-an-address", NET,
       "        raise ProbeError(\n"
       '            "blocked-address", f"{raw!r} is not an IP address", transient=False\n'
       "        ) from None",
       "        raise",
       "a resolver answer that is not an address is refused as blocked",
       f"{SSRF}::test_a_resolver_answer_that_is_not_an_address_is_blocked"),
    _m("net.check.always-blocked", NET,
       "if any(address in net for net in ALWAYS_BLOCKED if net.version == address.version):",
       "if False:",
       "the always-blocked ranges, whatever the allow-list says", _N_BLOCKED),
    _m("net.check.allow-list", NET,
       "if not any(address in net for net in policy.allowed_networks if net.version == "
       "address.version):",
       "if False:",
       "the allow-list (ATLAS_PROBE_ALLOWED_NETWORKS)",
       f"{NETS}::test_addresses_outside_the_allow_list_are_blocked"),
    # Names.
    *[
        _m(f"net.metadata-name.{name}", NET, f'"{name}"', '"not-a-metadata-name"',
           f"{name} is the cloud metadata service wherever it resolves", _N_NAMES)
        for name in ("metadata.google.internal", "metadata.goog", "instance-data.ec2.internal",
                     "metadata.azure.com")
    ],
    _m("net.metadata-name.metadata", NET, '{"metadata", ', '{"not-a-metadata-name", ',
       "'metadata' is the cloud metadata service wherever it resolves", _N_NAMES),
    _m("net.metadata-name.instance-data", NET, '"instance-data",', '"not-a-metadata-name",',
       "'instance-data' is the cloud metadata service wherever it resolves", _N_NAMES),
    _m("net.literal.zone-cut", NET,
       'bare = host.strip("[]").split("%", 1)[0]', 'bare = host.strip("[]")',
       "a literal with an unknown zone is still judged as a literal at registration",
       f"{NETS}::test_literal_address_reads_what_the_resolver_would_read_without_dns"),
    _m("net.registration.metadata-name", NET,
       "    if host in METADATA_NAMES:\n", "    if False:\n",
       "a metadata name is refused at registration", _N_NAMES),
    _m("net.registration.literal", NET,
       "    if address is not None:\n        check_address(address, policy)",
       "    if False:\n        check_address(address, policy)",
       "an address literal is judged at registration",
       f"{NETS}::test_an_address_literal_is_judged_at_registration_without_a_resolver"),
    _m("net.resolve.metadata-name", NET,
       '    if host.lower().rstrip(".") in METADATA_NAMES:\n', "    if False:\n",
       "a metadata name is refused at connection before DNS is asked", _N_NAMES),
    _m("net.resolve.no-answer", NET,
       "    if not answers:\n", "    if False:\n",
       "a name with no addresses is a DNS error",
       f"{NETS}::test_dns_failures_are_transient_dns_errors"),
    _m("net.resolve.every-answer", NET,
       "checked = [check_address(answer, policy) for answer in answers]",
       "checked = [check_address(answer, policy) for answer in answers[:1]]",
       "every answer is checked, not just the one used (round-robin bypass)",
       f"{NETS}::test_a_name_with_any_blocked_answer_is_refused"),
    _m("net.resolve.connect-to-checked", NET,
       "    return str(checked[0])", "    return answers[0]",
       "the socket connects to the address as judged, not as the resolver spelt it",
       f"{SSRF}::test_embedded_ipv4_is_what_the_socket_connects_to"),
    _m("net.connect.literal-checked", NET,
       "        return str(check_address(str(address), self.policy))",
       "        return str(address)",
       "an address literal is checked at every connection",
       f"{NETS}::test_metadata_and_link_local_are_blocked_even_when_everything_is_allowed"),
    _m("net.connect.name-resolved-and-checked", NET,
       "            return await loop.run_in_executor(None, resolve_checked, host, port, "
       "self.policy)",
       "            return host",
       "a name is resolved by the guard and its answers checked at every connection",
       f"{NETS}::test_a_name_resolving_to_a_metadata_address_is_blocked"),
    _m("net.pool.connect-timeout", NET,
       "connect_timeout=policy.connect_timeout,", "connect_timeout=1e9,",
       "the pool connects under the policy's connect timeout",
       f"{NETS}::test_the_pool_runs_under_the_policys_timeouts"),
    _m("net.pool.read-timeout", NET,
       "read_timeout=policy.read_timeout,", "read_timeout=1e9,",
       "the pool reads under the policy's per-read timeout",
       f"{NETS}::test_a_silent_target_ends_at_the_read_timeout"),
    _m("net.pool.max-connections", NET,
       "max_connections=max_connections,", "max_connections=1_000_000,",
       "at most max_connections connections per client",
       f"{NETS}::test_one_guarded_client_opens_at_most_64_connections_by_default"),
    _m("net.client.default-max-connections", NET,
       "*, max_connections: int = 64)", "*, max_connections: int = 64_000)",
       "64 connections per client by default",
       f"{NETS}::test_one_guarded_client_opens_at_most_64_connections_by_default"),
    # URLs.
    _m("net.url.scheme", NET,
       "    if parsed.scheme not in ALLOWED_SCHEMES:\n", "    if False:\n",
       "http and https only", _N_NEVER_URLS),
    _m("net.url.credentials", NET,
       "    if parsed.userinfo:\n", "    if False:\n",
       "credentials in URLs are refused", _N_NEVER_URLS),
    _m("net.url.no-host", NET,
       "    if not parsed.host:\n", "    if False:\n",
       "a URL without a host is refused", _N_NEVER_URLS),
    _m("net.url.unparsable", NET,
       '        raise ProbeError("bad-url", f"not a URL: {exc}", transient=False) from None',
       "        raise",
       "an unparsable URL is a bad-url ProbeError",
       f"{NETS}::test_an_unparsable_url_is_a_bad_url"),
    # Redirects.
    _m("net.redirect.no-location", NET,
       "    if not location:\n", "    if False:\n",
       "a redirect without Location is refused by name",
       f"{NETS}::test_a_redirect_without_location_and_a_url_without_host_are_permanent_faults"),
    _m("net.redirect.target-validated", NET,
       "target = validate_url(str(current.join(location)))",
       "target = httpx.URL(str(current.join(location)))",
       "a redirect target is validated like a URL typed in (scheme, credentials)",
       _N_REDIRECTS),
    _m("net.redirect.same-origin", NET,
       "    if (target.scheme, target.host, target.port) != (current.scheme, current.host, "
       "current.port):",
       "    if False:",
       "redirects never leave the origin", _N_REDIRECTS),
    _m("net.redirect.same-scheme", NET,
       "    if (target.scheme, target.host, target.port) != (current.scheme, current.host, "
       "current.port):",
       "    if (target.host, target.port) != (current.host, current.port):",
       "another scheme is another origin", _N_REDIRECTS),
    _m("net.redirect.same-host", NET,
       "    if (target.scheme, target.host, target.port) != (current.scheme, current.host, "
       "current.port):",
       "    if (target.scheme, target.port) != (current.scheme, current.port):",
       "another host is another origin",
       f"{NETS}::test_a_redirect_to_another_host_name_is_refused"),
    _m("net.redirect.same-port", NET,
       "    if (target.scheme, target.host, target.port) != (current.scheme, current.host, "
       "current.port):",
       "    if (target.scheme, target.host) != (current.scheme, current.host):",
       "another port is another origin",
       f"{NETS}::test_a_redirect_to_another_port_of_the_same_host_is_refused"),
    _m("net.redirect.cap", NET,
       "for _ in range(policy.max_redirects + 1):", "for _ in range(policy.max_redirects + 1000):",
       "at most max_redirects redirects are followed",
       f"{NETS}::test_each_redirect_status_counts_against_the_redirect_cap_and_a_post_refuses_it"),
    _m("net.post.redirect-refused", NET,
       "    if response.status in REDIRECT_STATUSES:\n        raise ProbeError(",
       "    if False:\n        raise ProbeError(",
       "a webhook POST follows no redirect and takes none as an answer",
       f"{NETS}::test_each_redirect_status_counts_against_the_redirect_cap_and_a_post_refuses_it"),
    # Status.
    _m("net.fetch.error-status", NET,
       "if response.status >= 400 and response.status not in accept_status:", "if False:",
       "an error status is an error, not evidence",
       f"{NETS}::test_a_status_of_400_is_an_error_for_a_fetch_and_a_post"),
    _m("net.post.error-status", NET,
       "    if response.status >= 400:\n", "    if False:\n",
       "an error status answering a POST is an error",
       f"{NETS}::test_a_status_of_400_is_an_error_for_a_fetch_and_a_post"),
    # Size and time bounds of afetch and apost.
    _m("net.fetch.body-cap", NET,
       "                max_bytes=policy.max_bytes,\n                headers={},",
       "                max_bytes=1 << 40,\n                headers={},",
       "a fetch reads at most max_bytes", f"{NETS}::test_a_50_mb_body_is_cut_off_at_the_cap"),
    _m("net.post.body-cap", NET,
       "                    max_bytes=policy.max_bytes,\n"
       '                    headers={"Content-Type": content_type},',
       "                    max_bytes=1 << 40,\n"
       '                    headers={"Content-Type": content_type},',
       "a POST's answer is read at most max_bytes",
       f"{NETS}::test_a_posts_answer_is_cut_off_at_the_cap"),
    _m("net.fetch.overall-timeout", NET,
       "        async with asyncio.timeout(policy.total_timeout):\n"
       "            return await _afetch(",
       "        async with asyncio.timeout(None):\n            return await _afetch(",
       "the overall deadline covers what the pool's deadline does not: resolving the name",
       f"{NETS}::test_a_slow_resolver_is_bounded_by_the_overall_deadline"),
    _m("net.post.overall-timeout", NET,
       "        async with asyncio.timeout(policy.total_timeout):\n"
       "            deadline = asyncio.get_running_loop().time() + policy.total_timeout",
       "        async with asyncio.timeout(None):\n"
       "            deadline = asyncio.get_running_loop().time() + policy.total_timeout",
       "a POST's overall deadline covers resolving the name",
       f"{NETS}::test_a_slow_resolver_is_bounded_by_the_overall_deadline"),
    _m("net.fetch.exchange-deadline", NET,
       "    deadline = asyncio.get_running_loop().time() + policy.total_timeout\n    for _ in",
       "    deadline = asyncio.get_running_loop().time() + 1e9\n    for _ in",
       "the exchange itself stops at the deadline, even where a cancellation would not land "
       "(Python 3.11's wait_for, issue 19.1)",
       f"{NETS}::test_the_exchange_stops_at_the_deadline_without_the_outer_timeout"),
    _m("net.post.exchange-deadline", NET,
       "            deadline = asyncio.get_running_loop().time() + policy.total_timeout\n"
       "            try:",
       "            deadline = asyncio.get_running_loop().time() + 1e9\n            try:",
       "a POST's exchange stops at the deadline without the outer timeout",
       f"{NETS}::test_the_exchange_stops_at_the_deadline_without_the_outer_timeout"),
]

# fmt: on

MUTANTS: list[Mutant] = [*BOUNDED_MUTANTS, *PICKLE_MUTANTS, *NET_MUTANTS]
