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

from probes import promapi, window
from probes.parsing import dcgm, engine, logevents, nvml_reading, sglang_info, windowed
from probes.parsing.exposition import (
    Labels,
    decode_exposition,
    parse_exposition,
    without_families,
)

QUANTILES = (0.5, 0.95, 0.99)
# Histograms whose largest observation in the window is bounded too: ``{key}_max_hi``, the
# upper bound of the highest bucket that counted any (a quantile sees no share under
# 1 - q, the top bucket sees every observation). vLLM V1's batches of outputs bound the
# tokens a step carried from above: where none passed 1.1x the chunk budget, no step did.
TOP_BUCKET_KEYS = frozenset({"output_batch_tokens"})
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
        # The served model(s), as the labels say (the budget's "fill from the engine").
        "models": [name[:200] for name in signals.model_names[:8]],
    }


def engine_observations(
    signals: engine.EngineSignals,
    snapshot: dict,
    history: Sequence[tuple[float, dict | window.Row]],
    now_ts: float,
    window_s: float,
) -> list[Observation]:
    """Gauges as read, per-rank gauges with their labels, counter rates and histogram
    quantiles over the window (``history``: earlier (timestamp, snapshot) pairs).

    Beside each windowed value, what it rests on: ``scrape_span_s`` (the seconds of
    scrapes behind this cycle's rates), each quantile's bucket as ``<q>_lo`` / ``<q>_hi``
    (``_hi`` absent when the rank is in the +Inf bucket) and each histogram's
    ``_window_count`` (observations in the window, not extrapolated)."""
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
    out.extend(lifetime_lengths(snapshot))
    current = window.to_row(snapshot)
    rows = [h if isinstance(h, window.Row) else window.to_row(h) for _, h in history]
    grid = windowed.Grid([*(ts for ts, _ in history), now_ts], window_s, now_ts)
    # How long the windowed values below were measured over: a rate of 0 from 10 s of
    # scrapes is not the rate of 0 five minutes would give (evaluation reads both). One
    # scrape has no windowed values, so nothing to give a span to.
    if grid.span > 0:
        out.append(("scrape_span_s", "", grid.span))
    layout = current.layout
    if layout.columnar and all(row.layout is layout for row in rows):
        # Every scrape in the window has the same series: each one is a column.
        out.extend(_columnar(layout, [*(row.values for row in rows), current.values], grid))
        return out
    series = [
        *((ts, h if isinstance(h, dict) else window.to_snapshot(h)) for ts, h in history),
        (now_ts, snapshot),
    ]
    counters = [snap["counters"] for _, snap in series]
    for key in snapshot["counters"]:
        values = [c.get(key) for c in counters]
        if None in values:  # not in every scrape: the series' own points
            points = [(ts, snap["counters"][key]) for ts, snap in series if key in snap["counters"]]
            value = windowed.rate(points, window_s, now_ts)
        else:
            value = grid.rate(values)
        if _finite(value):
            out.append((f"{key.removesuffix('_total')}_rate", "", value))
    for key in snapshot["histograms"]:
        out.extend(_histogram_observations(key, series, grid, window_s, now_ts))
    return out


def _columnar(layout: window.Layout, matrix: list, grid: windowed.Grid) -> list[Observation]:
    """Counter rates and histogram figures when every row has ``layout``: ``matrix``
    holds each scrape's values, oldest first; a series is one column of it."""
    out: list[Observation] = []
    columns = list(zip(*matrix, strict=True))
    for key, values in zip(layout.counters, columns, strict=False):
        value = grid.rate(values)
        if _finite(value):
            out.append((f"{key.removesuffix('_total')}_rate", "", value))
    at = len(layout.counters)
    for (key, bounds, _), les in zip(layout.histograms, layout.floats, strict=True):
        end = at + len(bounds)
        bucket_values = dict(zip(les, columns[at:end], strict=True))
        counts, sums = columns[end], columns[end + 1]
        quantiles = grid.quantiles_and_buckets(_quantiles_for(key), bucket_values)
        out.extend(
            _histogram_figures(
                key,
                quantiles,
                grid.rate(counts),
                grid.rate(sums),
                grid.observed_increase(counts),
            )
        )
        at = end + 2
    return out


def _histogram_observations(
    key: str,
    series: Sequence[tuple[float, dict]],
    grid: windowed.Grid,
    window_s: float,
    now_ts: float,
) -> list[Observation]:
    """One histogram's windowed quantiles (with their buckets), mean, count rate and
    window count. On the grid when every scrape has the same buckets and a count and sum;
    from each series' own points otherwise."""
    histograms = [snap["histograms"].get(key) for _, snap in series]
    on_grid = _bucket_columns(histograms)
    if on_grid is not None:
        bucket_values, counts, sums = on_grid
        quantiles = grid.quantiles_and_buckets(_quantiles_for(key), bucket_values)
        count_rate, sum_rate = grid.rate(counts), grid.rate(sums)
        counted = grid.observed_increase(counts)
    else:
        bucket_points: dict[float, list[tuple[float, float]]] = {}
        count_points, sum_points = [], []
        for (ts, _), other in zip(series, histograms, strict=True):
            if not other:
                continue
            for le, count in other["buckets"]:
                bucket_points.setdefault(float(le), []).append((ts, count))
            if other["count"] is not None and other["sum"] is not None:
                count_points.append((ts, other["count"]))
                sum_points.append((ts, other["sum"]))
        quantiles = windowed.histogram_quantiles_and_buckets_over_window(
            _quantiles_for(key), bucket_points, window_s, now_ts
        )
        count_rate = windowed.rate(count_points, window_s, now_ts)
        sum_rate = windowed.rate(sum_points, window_s, now_ts)
        counted = windowed.observed_increase(count_points, window_s, now_ts)
    return _histogram_figures(key, quantiles, count_rate, sum_rate, counted)


def _quantiles_for(key: str) -> tuple[float, ...]:
    """The quantiles a histogram's figures need, read in one pass over its buckets: the
    top one (1.0, whose bucket holds the largest observation) only where it is kept."""
    return (*QUANTILES, 1.0) if key in TOP_BUCKET_KEYS else QUANTILES


def _histogram_figures(
    key: str,
    quantiles: Sequence[tuple[float, tuple[float, float] | None]],
    count_rate: float | None,
    sum_rate: float | None,
    counted: float | None,
) -> list[Observation]:
    """One histogram's windowed figures as observations (non-finite ones left out);
    ``quantiles`` as ``_quantiles_for(key)`` lists them."""
    out: list[Observation] = []
    if len(quantiles) > len(QUANTILES):  # the top bucket's upper bound: {key}_max_hi
        top = quantiles[-1][1]
        if top is not None and _finite(top[1]):
            out.append((f"{key}_max_hi", "", top[1]))
    for q, (value, bucket) in zip(QUANTILES, quantiles[: len(QUANTILES)], strict=True):
        if _finite(value):
            name = f"{key}_p{round(q * 100)}"
            out.append((name, "", value))
            # The bucket that holds the rank: the value is interpolated inside it.
            if bucket is not None:
                out.extend(
                    (f"{name}_{end}", "", bound)
                    for end, bound in zip(("lo", "hi"), bucket, strict=True)
                    if _finite(bound)
                )
    if _finite(count_rate) and _finite(sum_rate) and count_rate > 0:
        out.append((f"{key}_mean", "", sum_rate / count_rate))
    if _finite(count_rate):
        out.append((f"{key}_count_rate", "", count_rate))
    if _finite(counted):
        out.append((f"{key}_window_count", "", counted))
    return out


# (signal, counter, histogram whose count is the requests it is divided by): vLLM V1
# counts a request's prompt tokens when its first token comes out (as TTFT is observed),
# its generated tokens as they come; a request is counted in e2e when it finishes.
LIFETIME_LENGTHS = (
    ("prompt_tokens_per_request", "prompt_tokens_total", "ttft"),
    ("output_tokens_per_request", "generation_tokens_total", "e2e"),
)


def lifetime_lengths(snapshot: dict) -> list[Observation]:
    """Average prompt and output length of every request since the engine started, from
    the cumulative counters alone (one scrape is enough). The windowed rates divide by
    requests that started or finished in the window, and an engine whose cache is held
    by a leak or a storm can go seconds without either: without a length nobody can say
    what the running requests hold. Generated tokens include those of requests still
    running, so the output length errs high (the KV of the running requests with it),
    the side on which neither a leak nor a veto is read into the difference."""
    out: list[Observation] = []
    for signal, counter, histogram in LIFETIME_LENGTHS:
        tokens = snapshot["counters"].get(counter)
        requests = (snapshot["histograms"].get(histogram) or {}).get("count")
        if _finite(tokens) and _finite(requests) and requests > 0:
            out.append((signal, "", tokens / requests))
    return out


def _bucket_columns(
    histograms: Sequence[dict | None],
) -> tuple[dict[float, list[float]], list[float], list[float]] | None:
    """Each bucket's, the count's and the sum's values across scrapes, when every scrape
    has the histogram with the same distinct bounds, a count and a sum; else None."""
    first = histograms[-1]
    if first is None:
        return None
    bounds = [le for le, _ in first["buckets"]]
    les = [float(le) for le in bounds]
    if len(set(les)) != len(les):
        return None
    columns: list[list[float]] = [[] for _ in les]
    counts, sums = [], []
    for other in histograms:
        if not other or other["count"] is None or other["sum"] is None:
            return None
        buckets = other["buckets"]
        if len(buckets) != len(bounds):
            return None
        for column, le, (other_le, count) in zip(columns, bounds, buckets, strict=True):
            if other_le != le:
                return None
            column.append(count)
        counts.append(other["count"])
        sums.append(other["sum"])
    return dict(zip(les, columns, strict=True)), counts, sums


def observe_engine(
    body: bytes, history: Sequence[tuple[float, dict]], now_ts: float, window_s: float
) -> Observed:
    """Parse an engine /metrics body. Raises ``ExpositionError`` for unusable text, and its
    ``EngineScrapeUnusable`` for an answer with no engine state in it (an empty body,
    HELP/TYPE lines alone, no vLLM or SGLang series): a probe error, never an idle engine."""
    text = decode_exposition(body)
    # Families no flavour reads are blanked first: ~30 % of a vLLM scrape's parse.
    exp = parse_exposition(without_families(text, engine.UNREAD_FAMILIES, engine.base_name))
    signals = engine.engine_signals(exp)
    if signals.empty:  # why it is unusable is told from the whole answer
        exp = parse_exposition(text)
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
# Events that explain an engine's death: beside none of them, its cause is not in the log.
# A re-raised OOM explains a death too: its first line may have come in an earlier read.
DEATH_CAUSES = frozenset({"cuda_oom", "cuda_oom_reraised", "startup_memory_error"})
# vLLM prints its stats every 5-10 s; a rate needs at least that much log time.
STATS_INTERVAL_S = 10.0
# "No preemption" needs this much log time in one read (a pasted excerpt of two seconds
# says nothing about the minutes around it), unless the log is followed continuously.
MIN_ZERO_RATE_SPAN_S = 60.0
MAX_UNRECOGNISED_KEPT = 5

# Stats lines (vLLM V0/V1, SGLang batch lines) as the engine signals /metrics would give:
# (event kind, value name) -> (signal, scale). Aggregated over engines like a scrape:
# KV usage is the fullest engine's, counts and rates add up.
_STANDS_IN = {
    ("stats", "kv_cache_usage_pct"): ("kv_cache_usage", 0.01),
    ("stats", "running"): ("requests_running", 1.0),
    ("stats", "waiting"): ("requests_waiting", 1.0),
    ("stats", "prompt_throughput"): ("prompt_tokens_rate", 1.0),
    ("stats", "generation_throughput"): ("generation_tokens_rate", 1.0),
    ("sglang_batch", "kv_cache_usage"): ("kv_cache_usage", 1.0),
    ("sglang_batch", "running"): ("requests_running", 1.0),
    ("sglang_batch", "waiting"): ("requests_waiting", 1.0),
    ("sglang_batch", "generation_throughput"): ("generation_tokens_rate", 1.0),
}
_MAX_OVER_ENGINES = frozenset({"kv_cache_usage"})


def _engine_key(event: logevents.LogEvent) -> str:
    engine = event.values.get("engine")
    return str(engine) if engine is not None else (event.process or "")


def _stands_in(events: Sequence[logevents.LogEvent]) -> list[Observation]:
    """The last value each engine's stats lines gave this cycle, as engine signals."""
    last: dict[tuple[str, str], float] = {}
    for event in events:
        for name, value in event.values.items():
            target = _STANDS_IN.get((event.kind, name))
            if target is not None and isinstance(value, float):
                last[(target[0], _engine_key(event))] = value * target[1]
    merged: dict[str, float] = {}
    for (signal, _), value in last.items():
        if signal in _MAX_OVER_ENGINES:
            merged[signal] = max(value, merged.get(signal, value))
        else:
            merged[signal] = merged.get(signal, 0.0) + value
    return [(signal, "", value) for signal, value in sorted(merged.items())]


# The chunk budget an engine says it started with: ``Chunked prefill is enabled with
# max_num_batched_tokens=N`` or the same value among the arguments its API server was
# given (vLLM), ``chunked_prefill_size=N`` (SGLang; -1 is off).
_CHUNK_BUDGETS = {
    ("chunked_prefill", "max_num_batched_tokens"),
    ("engine_args", "max_num_batched_tokens"),
    ("sglang_budget", "chunked_prefill_size"),
}
# No bound: chunking is off (SGLang's -1): its steps carry whole prompts.
NO_CHUNK_BOUND = 1e9
# Not known: a new start whose budget line has not been read (a crash-looping engine can
# die between its banner and its config; vLLM 0.32 on CPU logs no budget line at all, and
# names the budget among its arguments only where it was set). Recorded, not left out,
# so that the budget a previous start logged no longer stands for the engine running now,
# and read by evaluation as no value
# (vocabulary.UNKNOWN_MARKS): "no line" is no evidence of unbounded steps (it confirmed
# oversized chunks on a simulated engine restarting after each OOM).
CHUNK_BUDGET_UNKNOWN = -1.0
_STARTS = frozenset({"restart", "server_start", "engine_start"})
# What shows an engine ran (up, serving, or dead): a start after it needs its own budget
# line. Other events between a budget line and its start line (warnings read as errors
# during a real vLLM 0.32 start-up) do not.
_RAN = frozenset({"engine_ready", "stats", "engine_died", "cuda_oom", "cuda_oom_reraised"})


def _chunk_budget(events: Sequence[logevents.LogEvent]) -> list[Observation]:
    """The chunk budget the engines in this read run with, as of the read's end: no step
    of a chunking engine carries more tokens than that (the largest, where several engines
    of one boot logged one). ``CHUNK_BUDGET_UNKNOWN`` after a start that has logged none
    yet, ``NO_CHUNK_BOUND`` where chunking is off; nothing where the read shows neither.

    A budget line belongs to the start it is read with, before or after its start line:
    vLLM 0.32's API server logs the budget while building its config, before the engine
    core's "Initializing a V1 LLM engine" (the start Atlas recognises); SGLang logs it
    after its ``server_args`` banner. Once the engine ran (ready, stats, a death), a start
    with no budget of its own is not known."""
    current: float | None = None
    new_boot = True  # the next budget line starts a new set (nothing of this boot read yet)
    this_boot = False  # a budget line was read for the boot now starting
    for event in events:
        if event.kind in _STARTS:
            if event.kind == "server_start" and not this_boot:
                current, new_boot = CHUNK_BUDGET_UNKNOWN, True
            continue
        budget = None
        for kind, name in _CHUNK_BUDGETS:
            value = event.values.get(name) if event.kind == kind else None
            if isinstance(value, int | float) and not isinstance(value, bool):
                budget = float(value) if value > 0 else NO_CHUNK_BOUND
        if budget is None:
            if event.kind in _RAN:  # the engine ran: a later start needs its own line
                this_boot, new_boot = False, True
            continue
        fresh = current is None or new_boot or current == CHUNK_BUDGET_UNKNOWN
        current = budget if fresh else max(current, budget)  # type: ignore[type-var]
        new_boot, this_boot = False, True
    return [] if current is None else [("log_chunk_budget_tokens", "", current)]


def _preemptions(
    state: logevents.FollowerState,
    events: Sequence[logevents.LogEvent],
    clean: bool,
    followed: bool,
) -> list[Observation]:
    """Preemptions per second of log time, from what the log shows of them.

    vLLM V0 warns on every 50th preemption, V1 before 0.12 not at all, V1 from 0.12 adds
    ``Preemptions: N`` to a stats line only when N > 0, SGLang logs every retraction. So
    a positive count is evidence everywhere (a lower bound), zero only where the format
    would have shown a preemption (SGLang, or a V1 stream already seen to print them) and
    the read covers enough time: a minute of log, or the time since the previous read of
    a log followed from before.
    """
    seen = 0.0
    for event in events:
        if event.kind == "preemption":
            seen += 1
        elif event.kind == "stats":
            seen += float(event.values.get("preemptions", 0.0))
        elif event.kind == "kv_retraction":
            seen += float(event.values.get("retracted_reqs", 1.0))
    times = [e.timestamp for e in events if e.timestamp is not None]
    span = (max(times) - min(times)).total_seconds() if times else 0.0
    if seen > 0:
        return [("preemptions_rate", "", seen / max(span, STATS_INTERVAL_S))]
    kinds = {e.kind for e in events}
    shows_all = logevents.shows_every_preemption(state, kinds)
    covered = followed or span >= MIN_ZERO_RATE_SPAN_S
    return [("preemptions_rate", "", 0.0)] if clean and shows_all and covered else []


def observe_log(
    state: logevents.FollowerState, chunk: bytes, now: datetime
) -> tuple[logevents.FollowerState, Observed]:
    """Events from the new log bytes: counts per kind this cycle, plus stats-line numbers.

    The follower state (carry-over partial line, warm-up flag) travels in the snapshot
    so the next cycle continues where this one stopped.

    Absence is not evidence: the incident kinds are counted at 0 only when this read was
    complete (no line cut short) and clean (no line that looked like an error went
    unrecognised, no engine death without its cause) in a format the parser knows. Lines
    that looked like errors are counted as ``kind=unrecognised_error`` (the first few kept
    in the snapshot for people to read); evaluation holds every zero count in their
    window inconclusive.
    """
    followed = state.line_no > 0  # this read continues where an earlier one stopped
    state, events = logevents.feed(state, chunk, now)
    counts: dict[str, int] = {}
    out: list[Observation] = []
    kept = []
    unrecognised: list[str] = []
    stats_last: dict[str, float] = {}
    for event in events:
        kind = event.kind
        if kind == "cuda_graph_capture_finished" and event.values.get("after_warmup"):
            kind = "cuda_graph_capture_after_warmup"
        counts[kind] = counts.get(kind, 0) + 1
        if kind == logevents.UNRECOGNISED:
            unrecognised.append(event.text[:300])
        if event.kind == "stats":
            stats_last.update(
                (f"log_stats_{name}", float(value))
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
    deaths = [e for e in events if e.kind == "engine_died"]
    if deaths and not any(e.kind in DEATH_CAUSES for e in events):
        # The engine died of something this read does not show: it may have been an OOM.
        counts[logevents.UNRECOGNISED] = counts.get(logevents.UNRECOGNISED, 0) + 1
        unrecognised.append(f"{deaths[0].text[:260]} (cause of death not in the log)")
    if state.traceback:
        # A traceback whose exception line is still to come: until it explains itself,
        # it is an error nobody recognised.
        counts[logevents.UNRECOGNISED] = counts.get(logevents.UNRECOGNISED, 0) + 1
        unrecognised.append(f"{state.traceback[:260]} (its exception line not read yet)")
    clean = not counts.get(logevents.UNRECOGNISED) and not counts.get("line_truncated")
    if clean and state.flavour:
        for kind in ZERO_COUNTED_EVENTS:
            counts.setdefault(kind, 0)
        # "No capture after warm-up" is only known once the follower has seen warm-up end.
        if state.warm:
            counts.setdefault("cuda_graph_capture_after_warmup", 0)
    out.extend(("log_events", f"kind={kind}", float(n)) for kind, n in sorted(counts.items()))
    out.extend((name, "", value) for name, value in sorted(stats_last.items()))
    out.extend(_stands_in(events))
    out.extend(_chunk_budget(events))
    out.extend(_preemptions(state, events, clean, followed))
    snapshot = {"follower": _state_to_json(state), "events": kept}
    if unrecognised:
        snapshot["unrecognised"] = unrecognised[:MAX_UNRECOGNISED_KEPT]
    return state, Observed(snapshot, tuple(dict.fromkeys(out)))


def _state_to_json(state: logevents.FollowerState) -> dict:
    return {
        "carry": state.carry.decode("latin-1"),
        "line_no": state.line_no,
        "discarding": state.discarding,
        "started": state.started,
        "warm": state.warm,
        "capturing": state.capturing,
        "held": state.held,
        "held_line_no": state.held_line_no,
        "traceback": state.traceback,
        "flavour": state.flavour,
        "reports_preemptions": state.reports_preemptions,
        "booting": state.booting,
        "failure": state.failure,
        "failure_line": state.failure_line,
        "failure_at": state.failure_at.isoformat() if state.failure_at else None,
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
        held=str(data.get("held", ""))[: logevents.MAX_LINE],
        held_line_no=int(data.get("held_line_no", 0)),
        traceback=str(data.get("traceback", ""))[:512],
        flavour=str(data.get("flavour", ""))[:16],
        reports_preemptions=bool(data.get("reports_preemptions", False)),
        booting=bool(data.get("booting", False)),
        failure=str(data.get("failure", ""))[:64],
        failure_line=int(data.get("failure_line", 0)),
        failure_at=_stamp(data.get("failure_at")),
    )


def _stamp(value: object) -> datetime | None:
    """An ISO stamp from the stored follower state; anything else is no stamp."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


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
    snapshot: dict = {"args": dict(list(args.items())[:200]), "ranks": len(info.ranks)}
    # What "fill from the engine" proposes: the enforced cap and the smallest rank's pool.
    if cap is not None:
        snapshot["effective_max_running_requests"] = cap
    capacities = [r.token_capacity for r in info.ranks if r.token_capacity]
    if capacities:
        snapshot["token_capacity"] = min(capacities)
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
