"""Budget fields proposed from what a deployment's engine reports about itself.

The engine knows its KV pool (vLLM's ``cache_config_info``, SGLang's token capacity),
its served model and, for SGLang, its chunk size and running-request cap; a commander
who types those into the budget by hand copies them wrong or lets them go stale. The
proposal is only shown: the commander accepts it by saving the form (an audited edit).

This app sits below probes, so it never reads what the engine reported: the app that
does (probes, ``probes.reported``) registers a reader at start-up, and ``propose`` is a
pure function of the plain values it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from deployments.budget import Budget, kv_budget_gib_for_capacity
from deployments.models import Engine

Reported = Mapping[str, float | str]
Reader = Callable[[object], Reported]
_READERS: list[Reader] = []


@dataclass(frozen=True)
class Proposal:
    """One form field and the value the engine's report gives it, with where it came from."""

    field: str
    value: float | int | str
    current: float | int | str
    why: str
    # The report's keys the value rests on, so a caller that knows where each key came
    # from (an engine read at registration, ``probes.engine_discovery``) can say so.
    keys: tuple[str, ...] = ()

    @property
    def changes(self) -> bool:
        return self.value != self.current


def register_reader(reader: Reader) -> None:
    """Let ``reader(deployment_id)`` supply the engine's report (the probes app does)."""
    if reader not in _READERS:
        _READERS.append(reader)


def reported(deployment_id) -> dict[str, float | str]:
    """What the registered readers say the deployment's engine reports, merged."""
    out: dict[str, float | str] = {}
    for reader in _READERS:
        out.update(reader(deployment_id))
    return out


def _positive(value: float | str | None) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value > 0 else None


def propose(deployment, report: Reported) -> list[Proposal]:
    """Fields the report determines, in form order; a value the report lacks (or gives
    as zero, negative or text where a number belongs) proposes nothing for its field."""
    budget = Budget.of(deployment)
    out: list[Proposal] = []
    engine = str(report.get("engine", "the engine"))
    # The engine field holds the engines a deployment can name (vLLM, SGLang); another
    # engine (TensorRT-LLM) proposes nothing for it rather than a wrong choice.
    choice = next((value for value, label in Engine.choices if label == engine), None)
    if choice is not None:
        out.append(
            Proposal(
                "engine",
                choice,
                deployment.engine,
                f"its metrics and endpoints are {engine}'s",
                ("engine",),
            )
        )
    tokens = _positive(report.get("kv_capacity_tokens"))
    if tokens is not None:
        blocks, size = _positive(report.get("kv_blocks")), _positive(report.get("kv_block_size"))
        layout = f" ({blocks:,.0f} blocks x {size:g})" if blocks and size else ""
        out.append(
            Proposal(
                "kv_budget_gib_per_rank",
                kv_budget_gib_for_capacity(budget, tokens),
                budget.kv_budget_gib_per_rank,
                f"{engine} reports {tokens:,.0f} KV tokens{layout}; at this deployment's "
                f"{budget.kv_bytes_per_token:,} KV bytes per token that is the KV budget "
                "whose capacity matches",
                ("kv_capacity_tokens", "kv_blocks", "kv_block_size"),
            )
        )
    model = report.get("served_model")
    if isinstance(model, str) and model.strip():
        out.append(
            Proposal(
                "model_name",
                model.strip()[:200],
                deployment.model_name,
                f"{engine} serves it",
                ("served_model",),
            )
        )
    for key, field, what in (
        ("tp_size", "tp_size", "tensor-parallel degree"),
        ("chunked_prefill_size", "max_num_batched_tokens", "chunked-prefill size"),
        ("max_running_requests", "max_num_seqs", "running-request cap"),
    ):
        value = _positive(report.get(key))
        if value is not None and value.is_integer():
            out.append(
                Proposal(
                    field,
                    int(value),
                    getattr(budget, field),
                    f"{engine} reports its {what}: {value:,.0f}",
                    (key,),
                )
            )
    return out


def notes(report: Reported) -> list[str]:
    """What the engine reports that no budget field holds, shown beside the proposal."""
    out = []
    length = _positive(report.get("max_model_len"))
    if length is not None:
        out.append(f"Max model length: {length:,.0f} tokens.")
    concurrency = _positive(report.get("kv_max_concurrency"))
    if concurrency is not None:
        out.append(
            f"KV room for {concurrency:g} requests of the max model length at once "
            "(the engine's own estimate)."
        )
    return out
