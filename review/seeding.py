"""Realistic closed investigations in bulk, for review, statistics and load tests.

Each seeded investigation follows what the domain actions would have written: the
symptom's playbook hypotheses eliminated and one confirmed, the confirmed cause's fix (when
the playbook has a fix template) recorded and verified, then closed; root_cause is set only
when a fix was recorded, as ``close_investigation`` does. Timelines, decision reasons, fix
notes and postmortem narratives are drawn from per-cause phrasings, dates spread over the
past ``days``; some are drills, some were closed with an override. Deterministic for a seed.

Rows go in with bulk_create (no signals), then the search documents are built in batches.
"""

from __future__ import annotations

import contextlib
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from deployments.models import Deployment
from investigations.choices import DecisionAction, EventKind, VerificationState
from investigations.models import Decision, FixRecord, Investigation, TimelineEvent
from investigations.playbook import playbooks
from postmortems.models import Postmortem, PostmortemVersion
from review import indexing
from teams.models import Team

BATCH = 2000
DEPLOYMENTS = (("atlas-prod", "vllm"), ("atlas-canary", "vllm"), ("atlas-sglang", "sglang"))
SYMPTOM_WEIGHTS = {
    "high-ttft": 5,
    "gpu-oom": 3,
    "itl-spikes": 4,
    "low-gpu-utilisation": 2,
    "throughput-drop": 2,
}

# Per cause: (why it was confirmed, why it was ruled out, what the fix note said,
# a sentence for the narrative). Each cause's own words appear only in its phrasings.
PHRASES: dict[str, tuple[str, str, str, str]] = {
    "router-latency": (
        "Router p95 forwarding delay at {n} ms, engines idle while requests sit in the router",
        "Router forwarding delay {n} ms, well under the 20 ms budget",
        "Doubled router replicas; forwarding delay back to {n} ms",
        "The load balancer held requests before they reached any engine.",
    ),
    "queue-backlog": (
        "Arrivals exceed service rate: {n} waiting and climbing with KV headroom to spare",
        "Waiting requests at {n}, inside the usual band",
        "Added {n} replicas behind the router",
        "Demand simply outgrew capacity; the backlog grew every minute.",
    ),
    "prefill-slow": (
        "Prefill of {n}-token prompts far above tokens times cost per token",
        "Prefill time on budget for the prompt lengths seen",
        "Enabled chunked prefill with a {n}-token budget",
        "Long prompts were prefilled in one piece and stalled everyone behind them.",
    ),
    "kv-cache-pressure": (
        "KV cache at {n} % with preemptions climbing",
        "KV cache usage at {n} %, preemptions flat",
        "Lowered max-num-seqs so KV occupancy stays under 80 %",
        "The KV cache filled up and requests were preempted and recomputed.",
    ),
    "cuda-graph-pool-growth": (
        "Graph captures after warm-up in the engine log, reserved memory stepping up {n} times",
        "No graph captures after warm-up",
        "Captured the full batch-size set at start-up",
        "On-the-fly graph captures kept private pools reserved until memory ran out.",
    ),
    "kv-block-leak": (
        "Block usage ratchets up off-peak; {n} blocks never returned after aborts",
        "Running requests account for every block in use",
        "Restarted the engines and filed the leak upstream",
        "Blocks of aborted requests were never freed, so usage only went up.",
    ),
    "allocator-leak": (
        "Allocated memory grows {n} MiB per hour with flat traffic",
        "Allocated memory flat over the window",
        "Found the retained tensor in the sampler cache",
        "A tensor was kept alive per request until CUDA ran out of memory.",
    ),
    "oversized-prefill-chunks": (
        "Steps carrying {n}-token prefill chunks line up with the spikes",
        "Chunk sizes stay inside the batched-token budget",
        "Set a strict chunk budget of {n} tokens",
        "Huge prefill chunks stretched steps and every decode inside them.",
    ),
    "gc-pauses": (
        "gc generation-2 collections of {n} ms match the stalls",
        "Collector pauses under 5 ms",
        "Froze long-lived objects and moved collection between steps",
        "Garbage collection paused the engine loop at the worst moments.",
    ),
    "tp-straggler": (
        "Rank {n} straggler: its step time trails the other ranks at every all-reduce",
        "Per-rank step times even; no straggler",
        "Drained the node with the straggler rank",
        "One tensor-parallel rank lagged and every step waited for it.",
    ),
    "gpu-throttling": (
        "SM clocks at {n} MHz on every GPU, thermal limits flagged",
        "Clocks at full speed across ranks",
        "Fixed the cooling loop; clocks restored",
        "The GPUs ran hot and slowed down together.",
    ),
}
OVERRIDES = (
    "Mitigated by shifting traffic to the standby cluster; verification window not reached.",
    "Traffic dropped overnight before verification could pass; reopen if it returns.",
    "Closed after the on-call handover; the fix is in but the evidence is thin.",
)
GOOD = (
    "Paging worked and the first responder had the dashboard open within minutes.",
    "The budget arithmetic pointed at the right branch early.",
    "Eliminations were recorded with their evidence, so the handover was painless.",
)
BAD = (
    "We chased the obvious suspect before looking at the numbers.",
    "The alert fired late because the threshold was tuned for daytime load.",
    "Nobody owned the runbook for this deployment.",
)
LUCKY = (
    "It happened during a quiet hour.",
    "A canary caught it before the full rollout.",
    "The spare capacity was already provisioned.",
)


@dataclass
class SeedResult:
    team: Team
    investigations: int = 0
    drills: int = 0
    decisions: int = 0
    fixes: int = 0
    postmortems: int = 0
    documents: int = 0
    ids: list = field(default_factory=list)


def _tree(symptom: str) -> list:
    return list(playbooks()[symptom].walk())


@contextlib.contextmanager
def _explicit_times(*fields) -> Iterator[None]:
    """bulk_create would stamp auto_now_add fields with now; seeded rows carry their own."""
    saved = [(f, f.auto_now_add) for f in fields]
    try:
        for f, _ in saved:
            f.auto_now_add = False
        yield
    finally:
        for f, value in saved:
            f.auto_now_add = value


def _deployments(team: Team) -> list[Deployment]:
    existing = list(team.deployments.all())
    if existing:
        return existing
    return [Deployment.objects.create(team=team, name=n, engine=e) for n, e in DEPLOYMENTS]


@dataclass
class _Rows:
    investigations: list = field(default_factory=list)
    decisions: list = field(default_factory=list)
    fixes: list = field(default_factory=list)
    events: list = field(default_factory=list)
    postmortems: list = field(default_factory=list)
    versions: list = field(default_factory=list)


def _one(rows: _Rows, rng: random.Random, team, deployment, now: datetime, days: int, users):
    symptoms = list(SYMPTOM_WEIGHTS)
    symptom = rng.choices(symptoms, weights=list(SYMPTOM_WEIGHTS.values()))[0]
    playbook = playbooks()[symptom]
    nodes = _tree(symptom)
    leaves = [n for n in nodes if n.is_cause]
    opened = now - timedelta(seconds=rng.uniform(3600, days * 86_400))
    user = rng.choice(users) if users else None
    drill = rng.random() < 0.08
    inv = Investigation(
        id=uuid.uuid4(),
        team=team,
        deployment=deployment,
        symptom=symptom,
        title=f"{playbook.title} on {deployment.name}",
        status=Investigation.Status.CLOSED,
        is_drill=drill,
        opened_at=opened,
        opened_by=user,
        opened_by_name=user.get_username() if user else "automation",
    )
    who = inv.opened_by_name
    events: list[tuple[EventKind, datetime, str, dict]] = [
        (
            EventKind.OPENED,
            opened,
            f"Opened from symptom {symptom}",
            {"opened_by": who, "symptom": symptom, "fingerprint": ""},
        )
    ]
    unresolved = rng.random() < 0.05
    root = None if unresolved else rng.choice(leaves)
    others = [n for n in leaves if n is not root]
    eliminated = rng.sample(others, k=min(len(others), rng.randint(1, 3)))
    at = opened
    sequence = 0

    def decide(node, action: str, reason: str) -> None:
        nonlocal at, sequence
        at += timedelta(seconds=rng.lognormvariate(6.0, 0.8))  # minutes, sometimes an hour
        sequence += 1
        decision = Decision(
            investigation=inv,
            node=node.key,
            action=action,
            reason=reason,
            evidence={},
            automatic=action == DecisionAction.ELIMINATE and rng.random() < 0.2,
            decided_by=user,
            decided_at=at,
            sequence=sequence,
        )
        rows.decisions.append(decision)
        data = {
            "decision": str(decision.pk),
            "node": node.key,
            "action": action,
            "automatic": decision.automatic,
        }
        events.append((EventKind.DECISION, at, f"{action} {node.key}: {reason[:300]}", data))

    for node in eliminated:
        decide(node, DecisionAction.ELIMINATE, PHRASES[node.key][1].format(n=rng.randint(2, 90)))
    fix = None
    if root is not None:
        parent = next((n for n in nodes if root in n.children), None)
        if parent is not None:
            decide(
                parent,
                DecisionAction.CONFIRM,
                f"{rng.randint(12, 40)} waiting against a normal 3-8",
            )
        decide(root, DecisionAction.CONFIRM, PHRASES[root.key][0].format(n=rng.randint(2, 95)))
        if root.fix is not None:
            at += timedelta(seconds=rng.uniform(120, 1800))
            fix = FixRecord(
                investigation=inv,
                node=root.key,
                key=root.fix.key,
                parameters={},
                note=PHRASES[root.key][2].format(n=rng.choice([256, 512, 1024, 2, 3])),
                applied_by=user,
                applied_at=at,
            )
            rows.fixes.append(fix)
            data = {"fix": str(fix.pk), "node": root.key, "key": root.fix.key, "parameters": {}}
            events.append((EventKind.FIX, at, f"Applied {root.fix.key} for {root.key}", data))
    overridden = fix is None or rng.random() < 0.15
    inv.closed_at = at + timedelta(seconds=rng.uniform(600, 5400))
    inv.root_cause = fix.node if fix else ""
    inv.close_override = rng.choice(OVERRIDES) if overridden else ""
    summary = "Closed: verification passed" if not overridden else "Closed with override"
    data = {"root_cause": inv.root_cause, "override": overridden}
    if not overridden:  # an override says only that it had not passed
        data["verification"] = VerificationState.PASSING
    events.append((EventKind.CLOSED, inv.closed_at, summary, data))
    rows.investigations.append(inv)
    rows.events.extend(
        TimelineEvent(investigation=inv, kind=k, at=when, actor=user, summary=s, data=d)
        for k, when, s, d in events
    )
    if rng.random() < 0.7:
        pm = Postmortem(id=uuid.uuid4(), team=team, investigation=inv, created_at=inv.closed_at)
        what = PHRASES[root.key][3] if root else "The symptom cleared before a cause was confirmed."
        rows.postmortems.append(pm)
        rows.versions.append(
            PostmortemVersion(
                postmortem=pm,
                number=1,
                sections={
                    "summary": f"{playbook.title} on {deployment.name}. {what}",
                    "impact_notes": f"About {rng.randint(2, 40)} % of requests missed the SLO.",
                    "went_well": rng.choice(GOOD),
                    "went_wrong": rng.choice(BAD),
                    "lucky": rng.choice(LUCKY),
                    "narrative": what,
                },
                edited_by=user,
                created_at=inv.closed_at + timedelta(hours=2),
            )
        )


def seed(
    *, team_name: str, count: int, seed: int = 0, days: int = 365, build_index: bool = True
) -> SeedResult:
    """Create ``count`` closed investigations for the team (created if missing)."""
    team, _ = Team.objects.get_or_create(name=team_name)
    deployments = _deployments(team)
    users = [m.user for m in team.memberships.select_related("user")]
    rng = random.Random(seed)
    now = timezone.now()
    result = SeedResult(team=team)
    times = (
        Investigation._meta.get_field("opened_at"),
        Decision._meta.get_field("decided_at"),
        FixRecord._meta.get_field("applied_at"),
        TimelineEvent._meta.get_field("at"),
        Postmortem._meta.get_field("created_at"),
        PostmortemVersion._meta.get_field("created_at"),
    )
    for start in range(0, count, BATCH):
        rows = _Rows()
        for _ in range(min(BATCH, count - start)):
            _one(rows, rng, team, rng.choice(deployments), now, days, users)
        with _explicit_times(*times), transaction.atomic():
            Investigation.objects.bulk_create(rows.investigations)
            Decision.objects.bulk_create(rows.decisions)
            FixRecord.objects.bulk_create(rows.fixes)
            TimelineEvent.objects.bulk_create(rows.events)
            Postmortem.objects.bulk_create(rows.postmortems)
            PostmortemVersion.objects.bulk_create(rows.versions)
        result.investigations += len(rows.investigations)
        result.drills += sum(i.is_drill for i in rows.investigations)
        result.decisions += len(rows.decisions)
        result.fixes += len(rows.fixes)
        result.postmortems += len(rows.postmortems)
        result.ids.extend(i.pk for i in rows.investigations)
    if build_index:
        result.documents = indexing.rebuild(result.ids)
    return result
