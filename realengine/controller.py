"""The engine controller for deployments Atlas runs itself (test bed, demo, drills):
"apply the suggested fix" means restart the engine with the fix's settings.

A fix template's ``apply`` mapping names engine settings (``max_num_seqs: 11``,
``max_num_batched_tokens: 256``, ``enable_chunked_prefill: 1``); this module turns them
into the engine's flags through one table, refusing settings it cannot apply rather than
restarting with them silently dropped. Production deployments are not restarted by
Atlas: there the commander applies the fix and records it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from realengine.server import EngineFlags, EngineServer


class UnsupportedSetting(ValueError):
    """A fix asks for a setting this controller does not know how to apply."""


def _positive_int(value: float) -> int:
    number = int(value)
    if number != value or number < 1:
        raise UnsupportedSetting(f"{value!r} is not a positive integer")
    return number


# setting in a fix's `apply` -> (EngineFlags field, conversion)
SETTINGS: dict[str, tuple[str, Callable[[float], object]]] = {
    "max_num_seqs": ("max_num_seqs", _positive_int),
    "max_num_batched_tokens": ("max_num_batched_tokens", _positive_int),
    "enable_chunked_prefill": ("enable_chunked_prefill", lambda v: bool(v)),
}


def flags_for_fix(flags: EngineFlags, apply: Mapping[str, float]) -> EngineFlags:
    """The flags after applying ``apply``; pure."""
    changes = {}
    for name, value in apply.items():
        if name not in SETTINGS:
            raise UnsupportedSetting(f"cannot apply {name!r} to a vLLM engine")
        field, convert = SETTINGS[name]
        changes[field] = convert(value)
    return flags.with_changes(**changes)


@dataclass(frozen=True)
class Applied:
    before: EngineFlags
    after: EngineFlags
    restart_s: float  # stop + cold start until healthy: when the fix took effect


def apply_fix(server: EngineServer, apply: Mapping[str, float]) -> Applied:
    """Restart ``server`` (same port) with the fix's settings; returns when it is healthy."""
    before = server.flags
    after = flags_for_fix(before, apply)
    restart_s = server.restart(after)
    return Applied(before, after, restart_s)
