"""Writing what a poll found: idempotent, bulk, and one transaction per batch.

Preconditions: the caller holds the claim on the targets (``claim_targets``).
Idempotency: ``Poll`` is unique per (target, cycle) and ``Observation`` per
(target, signal, labels, time); inserts ignore conflicts, so a task redelivered
after its worker died writes each row at most once and loses none.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import F, OuterRef, Q, Subquery
from django.utils import timezone

from probes.models import Observation, Poll, Target
from probes.vocabulary import bound_of

LABELS_MAX = Observation._meta.get_field("labels").max_length
SIGNAL_MAX = Observation._meta.get_field("signal").max_length
# Rows per unnested INSERT: large enough that the statement's own cost vanishes, small
# enough that one statement's arrays stay a few megabytes.
UNNEST_CHUNK = 50_000
_SEP = "\x1f"  # between joined texts (ASCII unit separator)


def fit_labels(text: str) -> str:
    """Labels come from the target (a hostname, a label value): a long one must neither fail
    the whole cycle's insert nor merge two series, so its tail becomes a digest."""
    if len(text) <= LABELS_MAX:
        return text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{text[: LABELS_MAX - 17]}#{digest}"


@dataclass(frozen=True)
class PollOutcome:
    target_id: object
    ok: bool
    latency_s: float | None = None
    size_bytes: int | None = None
    error_kind: str = ""
    error: str = ""
    transient: bool = False
    snapshot: dict = field(default_factory=dict)
    observations: Sequence[tuple[str, str, float]] = ()  # (signal, labels, value)
    log_offset: int | None = None


def claim_targets(
    target_ids: Iterable, task_id: str, *, lease: timedelta, now: datetime | None = None
) -> list:
    """Claim targets for one task with a conditional UPDATE; return the ids it now holds.

    A target is free when its lease ran out, or when the claim is this very task's
    (a redelivered message has the same id, and must be able to finish the job).
    """
    now = now or timezone.now()
    ids = list(target_ids)
    free = Q(claimed_until__isnull=True) | Q(claimed_until__lt=now) | Q(claim_task=task_id)
    with transaction.atomic():
        Target.objects.filter(free, pk__in=ids).update(
            claim_task=task_id, claimed_until=now + lease
        )
        return list(
            Target.objects.filter(pk__in=ids, claim_task=task_id).values_list("pk", flat=True)
        )


def release_targets(target_ids: Iterable, task_id: str) -> None:
    Target.objects.filter(pk__in=list(target_ids), claim_task=task_id).update(
        claim_task="", claimed_until=None
    )


def release_task_claims(task_id: str) -> int:
    """Free every target a task still holds; for a task that will never run again.

    A revoked or expired message is discarded without running, so nothing else would
    release its claim before the lease ran out: a pool child SIGKILLed mid-poll has its
    message redelivered, and if that redelivery is already past ``expires`` the dead claim
    used to hold the deployment's targets for the whole lease (issue 19.6: 17 cycles)."""
    return Target.objects.filter(claim_task=task_id).update(claim_task="", claimed_until=None)


def already_polled(target_ids: Iterable, cycle_at: datetime) -> set:
    return set(
        Poll.objects.filter(target_id__in=list(target_ids), cycle_at=cycle_at).values_list(
            "target_id", flat=True
        )
    )


@transaction.atomic
def record_cycle(cycle_at: datetime, outcomes: Sequence[PollOutcome]) -> int:
    """Store one cycle's outcomes; returns how many polls were new (0 on a replay)."""
    polls = [
        Poll(
            target_id=o.target_id,
            cycle_at=cycle_at,
            ok=o.ok,
            error_kind=o.error_kind[:32],
            error=o.error[:500],
            transient=o.transient,
            latency_ms=None if o.latency_s is None else round(o.latency_s * 1000, 3),
            size_bytes=o.size_bytes,
            snapshot=o.snapshot,
        )
        for o in outcomes
    ]
    before = Poll.objects.filter(
        cycle_at=cycle_at, target_id__in=[o.target_id for o in outcomes]
    ).count()
    if connection.vendor == "postgresql" and polls:
        _insert_polls(polls)
    else:
        Poll.objects.bulk_create(polls, ignore_conflicts=True)
    _insert_observations(cycle_at, outcomes)
    _update_health(cycle_at, outcomes, timezone.now())
    return len(polls) - before


def _server_bound_cursor():
    """A cursor on Django's PostgreSQL connection that binds parameters on the server,
    in binary (Django's own cursors interpolate every parameter into the SQL text on the
    client, quoting each string with a regular expression), wrapped as Django wraps its
    cursors: query logging and counting, execute wrappers."""
    import psycopg

    connection.ensure_connection()
    raw = psycopg.Cursor(connection.connection)
    raw.format = psycopg.pq.Format.BINARY
    return connection._prepare_cursor(raw)


def _insert_polls(polls: list[Poll]) -> None:
    """``bulk_create(polls, ignore_conflicts=True)`` on PostgreSQL, with the parameters
    bound on the server: Django's client-side binding quoted every snapshot's JSON text
    with a regular expression (~1 ms per engine per cycle in the profile). The values are
    the ones the model's fields prepare; the snapshot is the JSON text Django would send."""

    fields = [
        Poll._meta.get_field(name)
        for name in (
            "target", "cycle_at", "ok", "error_kind", "error", "transient", "latency_ms",
            "size_bytes", "snapshot", "recorded_at",
        )
    ]  # fmt: skip
    recorded_at = timezone.now()
    for poll in polls:
        poll.recorded_at = recorded_at
    snapshot = fields.index(Poll._meta.get_field("snapshot"))
    columns = [
        [] if i == snapshot else [field.get_db_prep_save(getattr(p, field.attname), connection)
                                  for p in polls]
        for i, field in enumerate(fields)
    ]  # fmt: skip
    texts = [json.dumps(p.snapshot) for p in polls]
    types = ("uuid", "timestamptz", "bool", "text", "text", "bool", "float8", "int8", "text",
             "timestamptz")  # fmt: skip
    arrays_of = [f"%s::{t}[]" for t in types]
    # The snapshots as one text the server splits: psycopg dumps a text[] parameter in
    # text form, backslash-escaping every double quote of every JSON document through a
    # Python-level regex callback (~450 per engine snapshot; ~3 % of a 1,000-engine
    # cycle's CPU, 13 % under cProfile, which inflates Python calls). JSON text never
    # holds a raw control character (json.dumps escapes them), so the unit separator
    # cannot occur inside one; the guard keeps arrays for anything else.
    joined = _SEP.join(texts)
    params: list = []
    for i, column in enumerate(columns):
        if i != snapshot:
            params.append(column)
        elif len(texts) > 1 and joined.count(_SEP) == len(texts) - 1:
            params += [joined, _SEP]
            arrays_of[i] = "string_to_array(%s, %s)"
        else:
            params.append(texts)
    q = connection.ops.quote_name
    names = ", ".join(q(field.column) for field in fields)
    arrays = ", ".join(arrays_of)
    picks = ", ".join(f"u.c{i}::jsonb" if i == snapshot else f"u.c{i}" for i in range(len(types)))
    aliases = ", ".join(f"c{i}" for i in range(len(types)))
    sql = (
        # Identifiers come from the model and are quoted; values are parameters.
        f"INSERT INTO {q(Poll._meta.db_table)} ({names}) SELECT {picks} "  # noqa: S608
        f"FROM unnest({arrays}) AS u({aliases}) ON CONFLICT DO NOTHING"
    )
    with _server_bound_cursor() as cursor:
        cursor.execute(sql, params)


def _insert_observations(cycle_at: datetime, outcomes: Sequence[PollOutcome]) -> None:
    """Insert the cycle's observations, ON CONFLICT DO NOTHING (PostgreSQL and SQLite).

    This is the hottest write in the product, ~40-130 rows per engine per cycle. On
    PostgreSQL the rows go as columns unnested by one INSERT (see ``_Columns``), where
    a pipelined ``executemany`` (one Bind/Execute per row) cost ~6 ms of worker CPU and
    ~4 ms of the backend's per engine. Elsewhere a plain ``executemany``. Values are
    prepared by the model fields, so UUIDs and datetimes match the ORM's.
    """
    meta = Observation._meta
    target_field, time_field = meta.get_field("target"), meta.get_field("taken_at")
    taken_at = time_field.get_db_prep_value(cycle_at, connection)
    chunks = [_Columns()]
    for o in outcomes:
        if not o.ok or not o.observations:
            continue
        if len(chunks[-1].values) >= UNNEST_CHUNK:
            chunks.append(_Columns())
        chunks[-1].add(target_field.get_db_prep_value(o.target_id, connection), o.observations)
    if not chunks[0].values:
        return
    q = connection.ops.quote_name
    table = q(meta.db_table)
    columns = ", ".join(
        q(meta.get_field(name).column)
        for name in ("target", "taken_at", "signal", "labels", "value", "lo", "hi")
    )
    if connection.vendor == "postgresql":
        with _server_bound_cursor() as cursor:
            for chunk in chunks:
                chunk.insert(cursor, table, columns, taken_at)
        return
    sql = (
        # Identifiers come from the model and are quoted; values are parameters.
        f"INSERT INTO {table} ({columns}) VALUES (%s, %s, %s, %s, %s, %s, %s) "  # noqa: S608
        "ON CONFLICT DO NOTHING"
    )
    with connection.cursor() as cursor:
        for chunk in chunks:
            targets = [chunk.ids[i - 1] for i in chunk.index]
            rows = list(
                zip(
                    targets,
                    [taken_at] * len(targets),
                    *chunk.fitted(),
                    chunk.values,
                    chunk.los,
                    chunk.his,
                    strict=True,
                )
            )
            for start in range(0, len(rows), 5000):
                cursor.executemany(sql, rows[start : start + 5000])


class _Columns:
    """Observation rows as columns, built per target at C speed (``zip(*rows)``).

    On PostgreSQL each column travels as one text parameter that the server splits
    (``string_to_array``): joining strings and ``repr``-ing floats are C loops, where
    psycopg dumps an array parameter element by element in Python. Floats keep every bit
    (``repr`` round-trips and PostgreSQL reads it exactly). Targets go once each, rows
    name theirs by position. A text holding the separator, or a single row (whose empty
    text would split into no element), goes as arrays instead."""

    def __init__(self) -> None:
        self.ids: list = []
        self.index: list[int] = []  # 1-based position in ids, per row
        self.signals: list[str] = []
        self.labels: list[str] = []
        self.values: list[float] = []
        self.los: list[float | None] = []
        self.his: list[float | None] = []

    def add(self, target_id, observations: Sequence[tuple[str, str, float]]) -> None:
        self.ids.append(target_id)
        signals, labels, values, los, his = pack_bounds(observations)
        self.index.extend([len(self.ids)] * len(values))
        self.signals.extend(signals)
        self.labels.extend(labels)
        self.values.extend(values)
        self.los.extend(los)
        self.his.extend(his)

    def fitted(self) -> tuple[list[str], list[str]]:
        """Signals and labels cut to their columns (rarely needed: checked in C first)."""
        signals, labels = self.signals, self.labels
        if max(map(len, signals)) > SIGNAL_MAX:
            signals = [s[:SIGNAL_MAX] for s in signals]
        if max(map(len, labels)) > LABELS_MAX:
            labels = [fit_labels(label) for label in labels]
        return signals, labels

    def insert(self, cursor, table: str, columns: str, taken_at) -> None:
        signals, labels = self.fitted()
        n = len(self.values)
        signal_text, label_text = _SEP.join(signals), _SEP.join(labels)
        joinable = n > 1 and signal_text.count(_SEP) == label_text.count(_SEP) == n - 1
        if joinable:
            # An empty element is a NULL bound (string_to_array's third argument).
            source = (
                "unnest(string_to_array(%s, ',')::int[], string_to_array(%s, %s), "
                "string_to_array(%s, %s), string_to_array(%s, ',')::float8[], "
                "string_to_array(%s, ',', '')::float8[], string_to_array(%s, ',', '')::float8[])"
            )
            params: tuple = (
                ",".join(map(str, self.index)), signal_text, _SEP, label_text, _SEP,
                ",".join(map(repr, map(float, self.values))),
                ",".join(["" if b is None else repr(float(b)) for b in self.los]),
                ",".join(["" if b is None else repr(float(b)) for b in self.his]),
            )  # fmt: skip
        else:
            source = (
                "unnest(%s::int[], %s::text[], %s::text[], %s::float8[], %s::float8[], "
                "%s::float8[])"
            )
            params = (self.index, signals, labels, [float(v) for v in self.values],
                      _floats(self.los), _floats(self.his))  # fmt: skip
        cursor.execute(
            # Identifiers come from the model and are quoted; values are parameters.
            f"INSERT INTO {table} ({columns}) SELECT (%s::uuid[])[u.i], %s, u.s, u.l, u.v, "  # noqa: S608
            f"u.lo, u.hi FROM {source} AS u(i, s, l, v, lo, hi) ON CONFLICT DO NOTHING",
            (self.ids, taken_at, *params),
        )


def _floats(values: Sequence[float | None]) -> list[float | None]:
    return [None if v is None else float(v) for v in values]


def pack_bounds(
    observations: Sequence[tuple[str, str, float]],
) -> tuple[list[str], list[str], list[float], list[float | None], list[float | None]]:
    """Columns of a target's rows with each quantile's bucket bounds (``<q>_lo`` /
    ``<q>_hi``, ``probes.vocabulary.bound_of``) moved into the quantile's own row: 54 of an
    engine's ~126 rows a cycle. A bound whose quantile is not among the rows before it
    (none is, as ``probes.observe`` writes them) stays a row of its own, which readers
    take as they always did."""
    at: dict[tuple[str, str], int] = {}
    signals: list[str] = []
    labels: list[str] = []
    values: list[float] = []
    los: list[float | None] = []
    his: list[float | None] = []
    for signal, label, value in observations:
        bound = bound_of(signal)
        if bound is not None:
            row = at.get((bound[0], label))
            if row is not None:
                (los if bound[1] == "lo" else his)[row] = value
                continue
        at[(signal, label)] = len(values)
        signals.append(signal)
        labels.append(label)
        values.append(value)
        los.append(None)
        his.append(None)
    return signals, labels, values, los, his


def record_observations(
    target_id, taken_at: datetime, observations: Sequence[tuple[str, str, float]]
) -> None:
    """Store values the console derived itself (an analysed artifact's signals) on a
    stored kind's target: no poll row, no health fields, the same idempotent insert."""
    _insert_observations(taken_at, [PollOutcome(target_id, ok=True, observations=observations)])


def stored_target(deployment_id, kind: str) -> object:
    """The pk of the deployment's one target of the stored ``kind``, created on first use
    (the partial unique constraint makes a concurrent second create find the first)."""
    return Target.objects.get_or_create(deployment_id=deployment_id, kind=kind)[0].pk


def _update_health(cycle_at: datetime, outcomes: Sequence[PollOutcome], now: datetime) -> None:
    """The health strip's fields in two UPDATEs per cycle, whatever the number of targets:
    latency, size and error text are copied from the cycle's poll rows just written."""
    ok = [o.target_id for o in outcomes if o.ok]
    failed = [o.target_id for o in outcomes if not o.ok]
    this_poll = Poll.objects.filter(target=OuterRef("pk"), cycle_at=cycle_at)
    from_poll = {
        "last_latency_ms": Subquery(this_poll.values("latency_ms")[:1]),
        "last_size_bytes": Subquery(this_poll.values("size_bytes")[:1]),
    }
    if ok:
        Target.objects.filter(pk__in=ok).update(
            **from_poll, last_polled_at=now, last_success_at=now, consecutive_failures=0
        )
    if failed:
        Target.objects.filter(pk__in=failed).update(
            **from_poll,
            last_polled_at=now,
            last_error_at=now,
            last_error=Subquery(this_poll.values("error")[:1]),
            last_error_kind=Subquery(this_poll.values("error_kind")[:1]),
            last_error_transient=Subquery(this_poll.values("transient")[:1]),
            consecutive_failures=F("consecutive_failures") + 1,
        )
    offsets = [
        Target(pk=o.target_id, log_offset=o.log_offset)
        for o in outcomes
        if o.ok and o.log_offset is not None
    ]
    if offsets:
        Target.objects.bulk_update(offsets, ["log_offset"])
