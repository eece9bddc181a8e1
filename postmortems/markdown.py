"""The postmortem as Markdown: a pure function of the document.

Everything a person typed (narrative, reasons, notes, action items, titles) goes through
``escape`` or ``inline``: HTML is turned into entities (Markdown viewers pass raw HTML
through), and the characters that start emphasis, links, images, code, tables or block
constructs are backslash-escaped, so typed text always reads as the text it was.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any

# Inline markup anywhere in a line: code, emphasis, links/images, tables, strike-through.
_INLINE = re.compile(r"([\\`*_\[\]|~!])")
# Block markup at the start of a line: headings, lists, quotes (already entities),
# setext underlines, fences.
_BLOCK_START = re.compile(r"^([#+\-=])")
_ORDERED = re.compile(r"^(\d+)([.)])")


def escape(text: Any) -> str:
    """User text, possibly several lines, as Markdown that renders to exactly that text."""
    text = str(text or "").replace("\r\n", "\n").replace("\r", "\n")
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    lines = []
    for raw in text.split("\n"):
        line = _INLINE.sub(r"\\\1", raw.strip())  # leading spaces would make code blocks
        line = _BLOCK_START.sub(r"\\\1", line)
        line = _ORDERED.sub(r"\1\\\2", line)
        lines.append(line)
    # A line break inside a paragraph stays a line break.
    return "  \n".join(lines).strip()


def inline(text: Any) -> str:
    """User text on one line (a table cell, a list item, a heading)."""
    return escape(" ".join(str(text or "").split()))


def code_block(text: str, info: str = "") -> str:
    """A fenced block longer than any run of backticks inside, so nothing can close it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text.rstrip()}\n{fence}"


def when(value: datetime | date | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S UTC")
    return value.isoformat()


def num(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


def render_markdown(doc: Mapping[str, Any]) -> str:
    out: list[str] = []
    add = out.append
    dep = doc["deployment"]
    add(f"# Postmortem: {inline(doc['title'])}")
    add("")
    drill = " · drill" if doc["is_drill"] else ""
    add(f"- **Symptom:** {inline(doc['symptom_title'])} (`{doc['symptom']}`){drill}")
    add(f"- **Deployment:** {inline(dep['name'])} ({inline(dep['engine'])}"
        + (f", {inline(dep['model_name'])}" if dep.get("model_name") else "") + ")")  # fmt: skip
    add(f"- **Opened:** {when(doc['opened_at'])} by {inline(doc['opened_by'])}")
    closed = when(doc["closed_at"]) if doc["closed_at"] else "still open"
    add(f"- **Closed:** {closed}")
    add(f"- **Severity:** {doc['severity']['current'] or 'not set'}")
    add(f"- **Status:** {doc['incident_status']['current']}")
    add(f"- **Incident commander:** {inline(doc['roles']['commander'] or 'not assigned')}")
    add(f"- **Investigation:** `{doc['id']}` · playbook `{doc['playbook']}`")
    version = doc["version"]
    if version:
        comment = f" ({inline(version['comment'])})" if version["comment"] else ""
        add(
            f"- **Narrative:** version {version['number']}, edited by "
            f"{inline(version['edited_by'] or 'unknown')} at {when(version['created_at'])}{comment}"
        )
    _narrative(add, doc, "summary")
    _detection(add, doc)
    _impact(add, doc)
    _narrative(add, doc, "impact_notes")
    _root_cause(add, doc)
    _tree(add, doc)
    _fix(add, doc)
    _gate(add, doc)
    _command(add, doc)
    _timeline(add, doc)
    _action_items(add, doc)
    for key in ("went_well", "went_wrong", "lucky", "narrative"):
        _narrative(add, doc, key)
    return "\n".join(out).rstrip() + "\n"


def _section(add, title: str) -> None:
    add("")
    add(f"## {title}")
    add("")


def _narrative(add, doc, key: str) -> None:
    section = next(s for s in doc["narrative"] if s["key"] == key)
    if not section["text"].strip():
        return
    _section(add, section["title"])
    for paragraph in re.split(r"\n\s*\n", section["text"].strip()):
        add(escape(paragraph))
        add("")


def _detection(add, doc) -> None:
    d = doc["detection"]
    _section(add, "Detection")
    add(
        f"Alarm **{inline(d['title'])}**: {inline(d['measure'])} {d['op']} "
        f"{num(d['threshold'])} (`{d['threshold_expr']}`)."
    )
    if d["first_firing_at"]:
        add(f"First fired at {when(d['first_firing_at'])} measuring {num(d['first_measured'])}.")
    else:
        add("The timeline has no alarm event.")
    opened = f"Opened by {inline(d['opened_by'])}"
    if d["alert_fingerprint"]:
        opened += f" (alert fingerprint {inline(d['alert_fingerprint'])})"
    add(opened + ".")


def _impact(add, doc) -> None:
    i = doc["impact"]
    _section(add, "Impact")
    if i["breach_s"] is None:
        add(f"SLO breach duration: {i['affected_note']}.")
        return
    ongoing = " (still firing at the end of the record)" if i["ongoing"] else ""
    add(f"- **SLO breach:** {duration(i['breach_s'])} in {len(i['breaches'])} interval(s){ongoing}")
    for b in i["breaches"]:
        end = when(b["end"]) if b["cleared"] else f"{when(b['end'])} (not cleared)"
        add(f"  - {when(b['start'])} → {end}: {duration(b['seconds'])}")
    affected = (
        f"about {i['affected_requests']:,} ({i['affected_note']})"
        if i["affected_requests"] is not None
        else i["affected_note"]
    )
    add(f"- **Affected requests:** {affected}")


def _root_cause(add, doc) -> None:
    _section(add, "Root cause")
    cause = doc["root_cause"]
    if cause is None:
        add("No root cause was recorded.")
        return
    add(f"**{inline(cause['title'])}** (`{cause['key']}`)")
    if cause["rationale"]:
        add("")
        add(escape(cause["rationale"]))
    if cause["confirmed_by"]:
        d = cause["confirmed_by"]
        add("")
        who = inline(d["decided_by"])
        add(f"Confirmed by {who} at {when(d['decided_at'])}: {inline(d['reason'])}")


def _tree(add, doc) -> None:
    _section(add, "Hypotheses")
    add("Every branch the investigation decided, with the evidence as it was shown then.")
    for node in doc["tree"]:
        add("")
        level = "#" * min(6, 3 + node["depth"])
        add(f"{level} {inline(node['title'])} (`{node['key']}`): {node['state']}")
        if not node["decisions"]:
            add("")
            add("Not decided.")
        for d in node["decisions"]:
            add("")
            auto = " (automatic)" if d["automatic"] else ""
            add(
                f"**{d['action'].capitalize()}**{auto} by {inline(d['decided_by'])} at "
                f"{when(d['decided_at'])}: {inline(d['reason'])}"
            )
            if d["checks"]:
                add("")
                add("| Check | Measured | Confirm at | Eliminate at | Outcome | Window |")
                add("|---|---:|---:|---:|---|---:|")
                for c in d["checks"]:
                    add(
                        f"| {inline(c['title'])} | {num(c['measured'])} | "
                        f"{num(c['confirm_threshold'])} | {num(c['eliminate_threshold'])} | "
                        f"{inline(c['outcome'])}: {inline(c['reason'])} | {c['window_s']} s |"
                    )


def _fix(add, doc) -> None:
    _section(add, "Fix and verification")
    fix = doc["fix"]
    if fix is None:
        add("No fix was recorded.")
    else:
        add(f"**{inline(fix['title'])}** (`{fix['key']}` for `{fix['node']}`), applied by "
            f"{inline(fix['applied_by'])} at {when(fix['applied_at'])}.")  # fmt: skip
        if fix["parameters"]:
            shown = ", ".join(f"`{k}={v}`" for k, v in fix["parameters"].items())
            add(f"Parameters: {shown}.")
        if fix["command"]:
            add("")
            add(code_block(fix["command"], "sh"))
        if fix["note"]:
            add("")
            add(f"Note: {escape(fix['note'])}")
    v = doc["verification"]
    add("")
    if v["state"] == "none":
        add("Verification: none (no fix to verify).")
    else:
        add(
            f"Verification against the alarm's measurement: **{v['state']}** "
            f"({duration(v['elapsed_s'])} observed since the fix, window "
            f"{duration(v['window_s'])}, as of {when(v['at'])})."
        )
        add("")
        add("| Criterion | Measured | Threshold | Holds |")
        add("|---|---:|---:|---|")
        for c in v["criteria"]:
            holds = "no data" if c["holds"] is None else ("yes" if c["holds"] else "no")
            guard = " (guard)" if c["guard"] else ""
            add(f"| {inline(c['title'])} | {num(c['measured'])} | {c['op']} {num(c['threshold'])} "
                f"| {holds}{guard} |")  # fmt: skip
        if v["side_effects"]:
            add("")
            add("Side effects to act on: " + "; ".join(inline(s) for s in v["side_effects"]) + ".")
    if v["override"]:
        add("")
        add(f"Closed without a passing verification. Commander's reason: {escape(v['override'])}")


def _gate(add, doc) -> None:
    _section(add, "Regression gate")
    gate = doc["gate"]
    if gate is None:
        add("No signal was promoted to an alert.")
        return
    add(f"Alert **{inline(gate['name'])}** (for {gate['for']}): {inline(gate['summary'])}.")
    bt = gate["backtest"]
    if bt is not None:
        if bt["fired_at"] is None:
            add("Backtest on this record: the promoted signal would not have fired.")
        elif bt["lead_s"] is None:
            add(f"Backtest: it would have fired at {when(bt['fired_at'])}; the alarm never held.")
        else:
            side = "before" if bt["lead_s"] >= 0 else "after"
            add(f"Backtest: it would have fired at {when(bt['fired_at'])}, "
                f"{abs(bt['lead_s']):.0f} s {side} the alarm.")  # fmt: skip
    add("")
    add(code_block(gate["rule_yaml"], "yaml"))


def _command(add, doc) -> None:
    _section(add, "Severity, status and roles")
    add("### Severity")
    add("")
    changes = doc["severity"]["changes"]
    if not changes:
        add("Never set.")
    else:
        add("| Time (UTC) | Severity | Was | Who | Why |")
        add("|---|---|---|---|---|")
        for c in changes:
            add(
                f"| {when(c['at'])} | {c['severity']} | {c['previous'] or 'not set'} | "
                f"{inline(c['actor'])} | {inline(c['reason'])} |"
            )
    add("")
    add("### Status history")
    add("")
    if not doc["incident_status"]["changes"]:
        add("Investigating throughout.")
    else:
        add("| Time (UTC) | Status | Was | Who | Why |")
        add("|---|---|---|---|---|")
        for c in doc["incident_status"]["changes"]:
            add(
                f"| {when(c['at'])} | {c['status']} | {c['previous']} | {inline(c['actor'])} | "
                f"{inline(c['reason'])} |"
            )
    add("")
    add("### Roles")
    add("")
    roles = doc["roles"]
    if not roles["current"]:
        add("Nobody held a role.")
    for r in roles["current"]:
        add(f"- **{r['role']}:** {inline(', '.join(r['names']))}")
    if roles["history"]:
        add("")
        add("| Time (UTC) | Role | What | Who | By | Why |")
        add("|---|---|---|---|---|---|")
        for h in roles["history"]:
            what = {
                "handover": f"handed over from {inline(h['previous'])}",
                "release": "released",
                "opened": "opened it",
            }.get(h["op"], "assigned")
            who = h["previous"] if h["op"] == "release" else h["who"]
            add(
                f"| {when(h['at'])} | {h['role']} | {what} | {inline(who)} | "
                f"{inline(h['actor'])} | {inline(h['reason'])} |"
            )


def _timeline(add, doc) -> None:
    _section(add, "Timeline")
    add("| Time (UTC) | Event | Who | What |")
    add("|---|---|---|---|")
    for e in doc["timeline"]:
        who, what = inline(e["actor"]), inline(e["summary"])
        add(f"| {when(e['at'])} | {inline(e['kind'])} | {who} | {what} |")


def _action_items(add, doc) -> None:
    _section(add, "Action items")
    if not doc["action_items"]:
        add("None yet.")
        return
    add("| Action | Type | Owner | Due | Status |")
    add("|---|---|---|---|---|")
    for item in doc["action_items"]:
        add(
            f"| {inline(item['title'])} | {item['type']} | {inline(item['owner'])} | "
            f"{when(item['due'])} | {item['status']} |"
        )
