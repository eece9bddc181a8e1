"""What a deployment's engine last reported about its own configuration, as plain values.

Read from the newest successful poll of each target (the snapshot the probe stored):
an engine /metrics target's gauges (``kv_capacity_tokens``, ``kv_block_size``,
``kv_blocks``, ``kv_max_concurrency``, from vLLM's ``cache_config_info`` or SGLang's
``max_total_num_tokens``) and served model, and what a flavour's own info endpoint says
(SGLang /server_info's chunked-prefill size, running-request cap, TP size, context
length, served model: ``probes.parsing.sglang_info.budget_values``). The deployments
app turns these into proposed budget fields (``deployments.proposals``); it sits below this
one, so this module registers itself there at start-up.

Of several engines the smallest KV capacity is reported (the pool that fills first); a
value no target reported is simply absent, never zero.
"""

from __future__ import annotations

from collections.abc import Iterable

from probes.models import Poll, TargetKind
from probes.parsing.engine import FLAVOURS, engine_name

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
    """Plain values the engine reported; see the module docstring for the names.

    Which engine, and which endpoint besides /metrics tells its budget, come from the
    flavour table (``probes.parsing.engine.FLAVOURS``), never from a switch on its name.
    """
    out: dict[str, float | str] = {}
    for snapshot in _latest_snapshots(deployment_id, TargetKind.ENGINE):
        gauges = snapshot.get("gauges") or {}
        for key in _ENGINE_GAUGES:
            value = _number(gauges.get(key))
            if value is not None and (key not in out or value < float(out[key])):
                out[key] = value
        models = snapshot.get("models") or []
        if models and isinstance(models[0], str) and "served_model" not in out:
            out["served_model"] = models[0]
        name = engine_name(str(snapshot.get("flavour", "")))
        if name is not None:
            out.setdefault("engine", name)
    endpoints = {
        f.info_endpoint.target_kind: (f.engine, f.info_endpoint.budget)
        for f in FLAVOURS
        if f.info_endpoint is not None
    }
    for kind, (engine, budget) in endpoints.items():
        for snapshot in _latest_snapshots(deployment_id, kind):
            # The engine's own configuration endpoint names the engine beyond doubt.
            out["engine"] = engine
            for key, value in budget(snapshot).items():
                out.setdefault(key, value)
    return out
