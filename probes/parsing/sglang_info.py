"""SGLang ``/server_info`` (alias ``/get_server_info``) JSON -> a small, bounded record.

The budget arithmetic needs a handful of server args (TP size, running-request cap,
chunked-prefill size, static memory fraction, CUDA-graph batch sizes) and the per-DP-rank
``internal_states`` (effective request cap, memory split), reference §2.4. The payload is
otherwise large, version-dependent and attacker-controllable (it echoes env vars and the
launch command), so only known keys with scalar values are kept, strings are clipped, and
both size and nesting depth are bounded before ``json.loads`` runs. The gRPC server's
``GetServerInfo`` has the same args nested under ``server_args`` (and no internal state).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = [
    "ARGS_OF_INTEREST",
    "RankState",
    "ServerInfo",
    "ServerInfoError",
    "ServerInfoMalformed",
    "ServerInfoTooLarge",
    "budget_values",
    "parse_server_info",
]

MAX_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 32
MAX_RANKS = 512
MAX_STRING = 256

Scalar = bool | int | float | str | None

ARGS_OF_INTEREST = (
    "model_path",
    "served_model_name",
    "tp_size",
    "dp_size",
    "pp_size",
    "ep_size",
    "max_running_requests",
    "max_total_tokens",
    "max_total_num_tokens",
    "max_req_input_len",
    "max_prefill_tokens",
    "chunked_prefill_size",
    "mem_fraction_static",
    "cuda_graph_max_bs",
    "disable_cuda_graph",
    "disable_cuda_graph_padding",
    "disable_radix_cache",
    "enable_dp_attention",
    "enable_mixed_chunk",
    "schedule_policy",
    "schedule_conservativeness",
    "context_length",
    "page_size",
    "kv_cache_dtype",
    "attention_backend",
    "speculative_algorithm",
    "speculative_num_steps",
    "disaggregation_mode",
    "enable_metrics",
    "status",
    "version",
)
_RANK_KEYS = (
    "effective_max_running_requests_per_dp",
    "max_running_requests",
    "last_gen_throughput",
    "avg_spec_accept_length",
    "cuda_graph_max_bs",
    "decode_cuda_graph_memory_gb",
    "world_size",
    "disaggregation_mode",
)


class ServerInfoError(ValueError):
    """The payload could not be turned into a record; the poll records it and moves on."""


class ServerInfoTooLarge(ServerInfoError):
    pass


class ServerInfoMalformed(ServerInfoError):
    pass


@dataclass(frozen=True, slots=True)
class RankState:
    index: int
    values: Mapping[str, Scalar]
    weight_gb: float | None
    kvcache_gb: float | None
    graph_gb: float | None
    token_capacity: int | None


@dataclass(frozen=True, slots=True)
class ServerInfo:
    args: Mapping[str, Scalar]
    ranks: tuple[RankState, ...]
    ranks_truncated: bool

    def arg(self, name: str) -> Scalar:
        return self.args.get(name)

    @property
    def effective_max_running_requests(self) -> int | None:
        """Per-DP cap actually enforced (top-level ``max_running_requests`` is the CLI value,
        sgl-project/sglang#38846); summed over ranks."""
        caps = [r.values.get("effective_max_running_requests_per_dp") for r in self.ranks]
        if not caps or any(not isinstance(c, int) or isinstance(c, bool) for c in caps):
            return None
        return sum(caps)  # type: ignore[arg-type]


_STRING_RE = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET_RE = re.compile(r"[\[\]{}]")


def _check_depth(text: str, max_depth: int) -> None:
    depth = 0
    for m in _BRACKET_RE.finditer(_STRING_RE.sub("", text)):
        if m.group(0) in "[{":
            depth += 1
            if depth > max_depth:
                raise ServerInfoTooLarge(f"JSON nested deeper than {max_depth}")
        else:
            depth -= 1


def _scalar(value: Any) -> Scalar:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return value[:MAX_STRING]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return ",".join(value)[:MAX_STRING]  # served_model_name may be a list
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _rank(index: int, state: Any) -> RankState:
    if not isinstance(state, dict):
        return RankState(index, MappingProxyType({}), None, None, None, None)
    values = {k: _scalar(state[k]) for k in _RANK_KEYS if k in state}
    memory = state.get("memory_usage")
    weight = kv = graph = None
    capacity = None
    if isinstance(memory, dict):
        weight, kv = _number(memory.get("weight")), _number(memory.get("kvcache"))
        raw_graph = memory.get("graph")
        if isinstance(raw_graph, dict):  # 0.5.23: {phase: GB}
            parts = [_number(v) for v in raw_graph.values()]
            graph = sum(p for p in parts if p is not None) if parts else None
        else:
            graph = _number(raw_graph)
        cap = memory.get("token_capacity")
        capacity = cap if isinstance(cap, int) and not isinstance(cap, bool) else None
    return RankState(index, MappingProxyType(values), weight, kv, graph, capacity)


def parse_server_info(
    data: bytes | str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH
) -> ServerInfo:
    """Bounded parse; unknown keys are ignored, known keys with odd types become None."""
    if len(data) > max_bytes:
        raise ServerInfoTooLarge(f"{len(data)} bytes (max {max_bytes})")
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ServerInfoMalformed("invalid UTF-8") from None
    else:
        text = data
    _check_depth(text, max_depth)
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as err:
        cut = " (the body ends mid-document: truncated?)" if err.pos >= len(text.rstrip()) else ""
        raise ServerInfoMalformed(f"invalid JSON: {str(err)[:80]}{cut}") from None
    except (ValueError, RecursionError) as err:
        raise ServerInfoMalformed(f"invalid JSON: {str(err)[:80]}") from None
    if not isinstance(payload, dict):
        raise ServerInfoMalformed("top level is not an object")
    # The gRPC GetServerInfo (grpcurl's JSON) nests the args under "server_args"; the HTTP
    # endpoint puts them at the top level. Top-level keys win where both exist.
    nested = payload.get("server_args")
    source = {**nested, **payload} if isinstance(nested, dict) else payload
    args = {k: _scalar(source[k]) for k in ARGS_OF_INTEREST if k in source}
    states = payload.get("internal_states")
    ranks: list[RankState] = []
    truncated = False
    if isinstance(states, list):
        truncated = len(states) > MAX_RANKS
        ranks = [_rank(i, s) for i, s in enumerate(states[:MAX_RANKS])]
    elif isinstance(states, dict):  # pre-May-2025 servers returned a single dict
        ranks = [_rank(0, states)]
    return ServerInfo(MappingProxyType(args), tuple(ranks), truncated)


def _positive(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value > 0 else None


def budget_values(snapshot: Mapping[str, Any]) -> dict[str, float | str]:
    """A stored /server_info snapshot (``probes.observe``) -> plain budget values.

    The SGLang entry of the engine flavour table points here, so budget discovery reads
    the engine's own arguments without ``probes.reported`` knowing which engine it is:
    chunked-prefill size, TP size, context length, the running-request cap the scheduler
    enforces (summed over DP ranks) over the CLI's value, the KV pool in tokens and the
    served model. A value the engine did not report is absent, never zero.
    """
    raw_args = snapshot.get("args")
    args: Mapping[str, Any] = raw_args if isinstance(raw_args, Mapping) else {}
    out: dict[str, float | str] = {}
    for key, name in (
        ("chunked_prefill_size", "chunked_prefill_size"),
        ("tp_size", "tp_size"),
        ("context_length", "max_model_len"),
    ):
        value = _positive(args.get(key))
        if value is not None:
            out[name] = value
    cap = _positive(snapshot.get("effective_max_running_requests")) or _positive(
        args.get("max_running_requests")
    )
    if cap is not None:
        out["max_running_requests"] = cap
    capacity = _positive(args.get("max_total_num_tokens")) or _positive(
        snapshot.get("token_capacity")
    )
    if capacity is not None:
        out["kv_capacity_tokens"] = capacity
    served = args.get("served_model_name") or args.get("model_path")
    if isinstance(served, str) and served:
        out["served_model"] = served
    return out
