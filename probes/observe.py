"""From a fetched body to what is stored: a snapshot (for windowed statistics on later
cycles) and observations (the values charts and evaluation read).

Pure functions. Windowed values are computed the way Prometheus would compute
``rate(x[w])`` and ``histogram_quantile(q, rate(x_bucket[w]))``, from this cycle's
snapshot plus the snapshots of earlier cycles in the window.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from probes import promapi
from probes.parsing import dcgm, engine, logevents, nvml_reading, sglang_info, windowed
from probes.parsing.exposition import Labels, parse_exposition

QUANTILES = (0.5, 0.95, 0.99)
Observation = tuple[str, str, float]  # (signal, labels, value)


@dataclass(frozen=True)
class Observed:
    snapshot: dict
    observations: tuple[Observation, ...]


def label_text(labels: Labels) -> str:
    """Stable, readable series labels: ``engine=0,tp_rank=1`` (sorted by name)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels))[:200]


def _le_key(bound: float) -> str:
    return "+Inf" if math.isinf(bound) else repr(bound)


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def engine_snapshot(signals: engine.EngineSignals) -> dict:
    """JSON-safe (no NaN/Inf literals: PostgreSQL's jsonb refuses them)."""
    return {
        "flavour": signals.flavour,
        "gauges": {k: g.value for k, g in signals.gauges.items() if _finite(g.value)},
        "counters": {k: c.value for k, c in signals.counters.items() if _finite(c.value)},
        "histograms": {
            key: {
                "buckets": [[_le_key(le), count] for le, count in h.buckets],
                "count": h.count if _finite(h.count) else None,
                "sum": h.sum if _finite(h.sum) else None,
            }
            for key, h in signals.histograms.items()
            if h.buckets
        },
        "problems": list(signals.problems)[:20],
    }


def engine_observations(
    signals: engine.EngineSignals,
    snapshot: dict,
    history: Sequence[tuple[float, dict]],
    now_ts: float,
    window_s: float,
) -> list[Observation]:
    """Gauges as read, per-rank gauges with their labels, counter rates and histogram
    quantiles over the window (``history``: earlier (timestamp, snapshot) pairs)."""
    out: list[Observation] = []
    for key, gauge in signals.gauges.items():
        if _finite(gauge.value):
            out.append((key, "", gauge.value))
        if len(gauge.per_rank) > 1:
            out.extend(
                (key, label_text(labels), value)
                for labels, value in gauge.per_rank
                if _finite(value)
            )
    series = [*history, (now_ts, snapshot)]
    for key in snapshot["counters"]:
        points = [(ts, snap["counters"][key]) for ts, snap in series if key in snap["counters"]]
        value = windowed.rate(points, window_s, now_ts)
        if _finite(value):
            out.append((f"{key.removesuffix('_total')}_rate", "", value))
    for key in snapshot["histograms"]:
        bucket_points: dict[float, list[tuple[float, float]]] = {}
        count_points, sum_points = [], []
        for ts, snap in series:
            other = snap["histograms"].get(key)
            if not other:
                continue
            for le, count in other["buckets"]:
                bucket_points.setdefault(float(le), []).append((ts, count))
            if other["count"] is not None and other["sum"] is not None:
                count_points.append((ts, other["count"]))
                sum_points.append((ts, other["sum"]))
        values = windowed.histogram_quantiles_over_window(
            QUANTILES, bucket_points, window_s, now_ts
        )
        for q, value in zip(QUANTILES, values, strict=True):
            if _finite(value):
                out.append((f"{key}_p{round(q * 100)}", "", value))
        count_rate = windowed.rate(count_points, window_s, now_ts)
        sum_rate = windowed.rate(sum_points, window_s, now_ts)
        if _finite(count_rate) and _finite(sum_rate) and count_rate > 0:
            out.append((f"{key}_mean", "", sum_rate / count_rate))
        if _finite(count_rate):
            out.append((f"{key}_count_rate", "", count_rate))
    return out


def observe_engine(
    body: bytes, history: Sequence[tuple[float, dict]], now_ts: float, window_s: float
) -> Observed:
    """Parse an engine /metrics body. Raises ``ExpositionError`` for unusable text, and its
    ``EngineScrapeUnusable`` for an answer with no engine state in it (an empty body,
    HELP/TYPE lines alone, no vLLM or SGLang series): a probe error, never an idle engine."""
    exp = parse_exposition(body)
    signals = engine.engine_signals(exp)
    engine.require_usable(exp, signals)
    snapshot = engine_snapshot(signals)
    observations = engine_observations(signals, snapshot, history, now_ts, window_s)
    return Observed(snapshot, tuple(observations))


def dcgm_labels(record: dcgm.GpuRecord) -> str:
    """``gpu=0,host=h`` for a GPU, ``gpu=0,host=h,mig=3`` for one of its MIG instances: a
    slice is its own series, never merged into (or overwriting) the parent GPU's."""
    labels = f"gpu={record.gpu}" + (f",host={record.hostname}" if record.hostname else "")
    return labels + (f",mig={record.mig_instance}" if record.mig_instance is not None else "")


def observe_dcgm(body: bytes) -> Observed:
    """Per-GPU (and per-MIG-instance) fields; sentinel values are already missing.

    ``gpu_clock_events`` counts the thermal and power reasons only (``gpu_idle`` is not a
    throttle event), and is left out when a reason cannot be named. ``gpu_sm_clock_max_mhz``
    is the model's full SM clock (``gpu_models``) where the model is known."""
    records = dcgm.gpu_records(parse_exposition(body))
    out: list[Observation] = []
    for record in records:
        labels = dcgm_labels(record)
        out.extend(
            (f"gpu_{field}", labels, value)
            for field, value in record.fields.items()
            if _finite(value)
        )
        used = record.fb_used_fraction
        if _finite(used):
            out.append(("gpu_fb_used_fraction", labels, used))
        full = record.max_sm_clock_mhz
        if full is not None and record.mig_instance is None:
            out.append(("gpu_sm_clock_max_mhz", labels, full))
        if "clock_event_reasons" in record.fields or record.clock_events:
            # Zero reasons is evidence too: it eliminates throttling.
            throttling = dcgm.throttle_count(record.clock_events)
            if throttling is not None:
                out.append(("gpu_clock_events", labels, float(throttling)))
    snapshot = {
        "gpus": [
            {
                "gpu": r.gpu,
                "host": r.hostname,
                "model": r.model_name,
                "mig": r.mig_instance,
                "mig_profile": r.mig_profile,
                "clock_events": list(r.clock_events),
            }
            for r in records
        ]
    }
    return Observed(snapshot, tuple(out))


ZERO_COUNTED_EVENTS = (
    "cuda_oom",
    "engine_died",
    "restart",
    "kv_retraction",
)


def observe_log(
    state: logevents.FollowerState, chunk: bytes, now: datetime
) -> tuple[logevents.FollowerState, Observed]:
    """Events from the new log bytes: counts per kind this cycle, plus stats-line numbers.

    The follower state (carry-over partial line, warm-up flag) travels in the snapshot
    so the next cycle continues where this one stopped.
    """
    state, events = logevents.feed(state, chunk, now)
    counts: dict[str, int] = {}
    out: list[Observation] = []
    kept = []
    for event in events:
        kind = event.kind
        if kind == "cuda_graph_capture_finished" and event.values.get("after_warmup"):
            kind = "cuda_graph_capture_after_warmup"
        counts[kind] = counts.get(kind, 0) + 1
        if event.kind == "stats":
            out.extend(
                (f"log_stats_{name}", "", float(value))
                for name, value in event.values.items()
                if isinstance(value, int | float) and not isinstance(value, bool)
            )
        if len(kept) < 50:
            kept.append(
                {
                    "kind": kind,
                    "at": event.timestamp.isoformat() if event.timestamp else None,
                    "text": event.text[:300],
                    "values": {
                        k: v for k, v in event.values.items() if isinstance(v, str | int | float)
                    },
                }
            )
    # A log read with no OOM in it is evidence of no OOM: count the incident kinds even at 0,
    # so "no CUDA OOM since the fix" can hold rather than stay unknown.
    for kind in ZERO_COUNTED_EVENTS:
        counts.setdefault(kind, 0)
    # "No capture after warm-up" is only known once the follower has seen warm-up end.
    if state.warm:
        counts.setdefault("cuda_graph_capture_after_warmup", 0)
    out.extend(("log_events", f"kind={kind}", float(n)) for kind, n in sorted(counts.items()))
    snapshot = {"follower": _state_to_json(state), "events": kept}
    return state, Observed(snapshot, tuple(dict.fromkeys(out)))


def _state_to_json(state: logevents.FollowerState) -> dict:
    return {
        "carry": state.carry.decode("latin-1"),
        "line_no": state.line_no,
        "discarding": state.discarding,
        "started": state.started,
        "warm": state.warm,
        "capturing": state.capturing,
    }


def state_from_json(data: Mapping | None) -> logevents.FollowerState:
    if not data:
        return logevents.FollowerState()
    return logevents.FollowerState(
        carry=str(data.get("carry", "")).encode("latin-1")[-logevents.MAX_LINE :],
        line_no=int(data.get("line_no", 0)),
        discarding=bool(data.get("discarding", False)),
        started=bool(data.get("started", False)),
        warm=bool(data.get("warm", False)),
        capturing=bool(data.get("capturing", False)),
    )


def observe_sglang_info(body: bytes) -> Observed:
    """SGLang /server_info: the configuration the budget arithmetic needs, and per-rank
    memory split (weights, KV cache, CUDA graphs) as numbers."""
    info = sglang_info.parse_server_info(body)
    out: list[Observation] = []
    for rank in info.ranks:
        labels = f"tp_rank={rank.index}"
        for name, value in (
            ("sglang_weight_gb", rank.weight_gb),
            ("sglang_kvcache_gb", rank.kvcache_gb),
            ("sglang_graph_gb", rank.graph_gb),
            ("sglang_token_capacity", rank.token_capacity),
        ):
            if value is not None and _finite(float(value)):
                out.append((name, labels, float(value)))
    # jsonb refuses NaN/Infinity; every other scalar is kept as the server said it.
    args = {k: v for k, v in info.args.items() if not isinstance(v, float) or math.isfinite(v)}
    cap = info.effective_max_running_requests
    if cap is not None:
        out.append(("sglang_max_running_requests", "", float(cap)))
    snapshot = {"args": dict(list(args.items())[:200]), "ranks": len(info.ranks)}
    return Observed(snapshot, tuple(out))


def observe_nvml(reading: nvml_reading.NoGpu | tuple[nvml_reading.DeviceReading, ...]) -> Observed:
    """NVML on the GPU host. No NVML library is a state ("no GPU on this worker"), recorded
    as a successful read with zero devices, not an error on every cycle."""
    if isinstance(reading, nvml_reading.NoGpu):
        state = "no-gpu" if reading.expected else "nvml-error"
        snapshot = {"state": state, "error": reading.error, "message": reading.message[:300]}
        return Observed(snapshot, (("nvml_devices", "", 0.0),))
    out: list[Observation] = [("nvml_devices", "", float(len(reading)))]
    devices = []
    for device in reading:
        labels = f"gpu={device.index}"
        for name, value in device.fields.items():
            if isinstance(value, int | float) and not isinstance(value, bool) and _finite(value):
                out.append((f"nvml_{name}", labels, float(value)))
        reasons = device.fields.get("clock_event_reasons") or ()
        if "clock_event_reasons" in device.fields:
            throttling = dcgm.throttle_count(tuple(reasons))  # gpu_idle is not throttling
            if throttling is not None:
                out.append(("nvml_clock_events", labels, float(throttling)))
        used = sum(p.used_bytes or 0 for p in device.processes)
        out.append(("nvml_process_used_bytes", labels, float(used)))
        devices.append(
            {
                "gpu": device.index,
                "name": device.fields.get("name"),
                "clock_event_reasons": list(reasons),
                "errors": dict(device.errors),
                "processes": [
                    {"pid": p.pid, "used_bytes": p.used_bytes, "kind": p.kind}
                    for p in device.processes[:50]
                ],
            }
        )
    return Observed({"state": "ok", "devices": devices}, tuple(out))


def observe_prometheus(answers: Sequence[tuple[str, promapi.QueryResult]]) -> Observed:
    """Each configured query's series become observations named after the query, labelled
    with the series' labels (``__name__`` dropped); scalars are one unlabelled value."""
    out: list[Observation] = []
    for name, result in answers:
        if result.scalar is not None and _finite(result.scalar):
            out.append((name, "", result.scalar))
        for series in result.series[:200]:
            if not series.points:
                continue
            value = series.points[-1][1]
            if _finite(value):
                labels = tuple((k, v) for k, v in series.labels if k != "__name__")
                out.append((name, label_text(labels), value))
    return Observed({"queries": [name for name, _ in answers]}, tuple(dict.fromkeys(out)))
