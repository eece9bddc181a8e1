"""What a deployment's engine last reported about its own configuration, as plain values.

Read from the newest successful poll of each target (the snapshot the probe stored):
an engine /metrics target's gauges (``kv_capacity_tokens``, ``kv_block_size``,
``kv_blocks``, ``kv_max_concurrency``, from vLLM's ``cache_config_info`` or SGLang's
``max_total_num_tokens``) and served model, and SGLang /server_info's arguments (chunked-
prefill size, running-request cap, TP size, context length, served model). The deployments
app turns these into proposed budget fields (``deployments.proposals``); it sits below this
one, so this module registers itself there at start-up.

Of several engines the smallest KV capacity is reported (the pool that fills first); a
value no target reported is simply absent, never zero.
"""

from __future__ import annotations

from collections.abc import Iterable

from probes.models import Poll, TargetKind

_ENGINE_GAUGES = ("kv_capacity_tokens", "kv_block_size", "kv_blocks", "kv_max_concurrency")


def _latest_snapshots(deployment_id, kind: str) -> Iterable[dict]:
    """The newest successful poll's snapshot of each enabled target of ``kind``."""
    seen: set = set()
    polls = (
        Poll.objects.filter(
            target__deployment_id=deployment_id, target__kind=kind, target__enabled=True, ok=True
        )
        .order_by("target_id", "-cycle_at")
        .values_list("target_id", "snapshot")
    )
    for target_id, snapshot in polls.iterator(chunk_size=200):
        if target_id in seen:
            continue
        seen.add(target_id)
        if isinstance(snapshot, dict):
            yield snapshot


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value > 0 else None


def engine_report(deployment_id) -> dict[str, float | str]:
    """Plain values the engine reported; see the module docstring for the names."""
    out: dict[str, float | str] = {}
    for snapshot in _latest_snapshots(deployment_id, TargetKind.ENGINE):
        gauges = snapshot.get("gauges") or {}
        flavour = str(snapshot.get("flavour", ""))
        for key in _ENGINE_GAUGES:
            value = _number(gauges.get(key))
            if value is not None and (key not in out or value < float(out[key])):
                out[key] = value
        models = snapshot.get("models") or []
        if models and isinstance(models[0], str) and "served_model" not in out:
            out["served_model"] = models[0]
        if flavour:
            out.setdefault("engine", "SGLang" if flavour == "sglang" else "vLLM")
    for snapshot in _latest_snapshots(deployment_id, TargetKind.SGLANG_INFO):
        args = snapshot.get("args") or {}
        out["engine"] = "SGLang"
        for key, name in (
            ("chunked_prefill_size", "chunked_prefill_size"),
            ("tp_size", "tp_size"),
            ("context_length", "max_model_len"),
        ):
            value = _number(args.get(key))
            if value is not None:
                out.setdefault(name, value)
        # The cap the scheduler enforces (summed over DP ranks) over the CLI's value.
        cap = _number(snapshot.get("effective_max_running_requests")) or _number(
            args.get("max_running_requests")
        )
        if cap is not None:
            out.setdefault("max_running_requests", cap)
        capacity = _number(args.get("max_total_num_tokens")) or _number(
            snapshot.get("token_capacity")
        )
        if capacity is not None and "kv_capacity_tokens" not in out:
            out["kv_capacity_tokens"] = capacity
        served = args.get("served_model_name") or args.get("model_path")
        if isinstance(served, str) and served and "served_model" not in out:
            out["served_model"] = served
    return out
