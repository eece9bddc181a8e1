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
    add(f"- **Review:** {review_line(doc)}")
    # The sections in the order teams write them; the record's evidence after them.
    _narrative(add, doc, "summary", always=True)
    _impact(add, doc)
    _narrative(add, doc, "impact_notes", level="###")
    _narrative(add, doc, "trigger", always=True)
    _detection(add, doc)
    _narrative(add, doc, "detection_notes", level="###")
    _fix(add, doc)
    _narrative(add, doc, "resolution_notes", level="###")
    _root_cause(add, doc)
    _section(add, "Lessons learned")
    for key in ("went_well", "went_wrong", "lucky"):
        _narrative(add, doc, key, always=True, level="###")
    _action_items(add, doc)
    _timeline(add, doc)
    _section(add, "Supporting evidence")
    add("What the record holds behind the sections above.")
    _tree(add, doc)
    _gate(add, doc)
    _command(add, doc)
    _narrative(add, doc, "narrative")
    return "\n".join(out).rstrip() + "\n"


def review_line(doc) -> str:
    version = doc["version"]
    state = (version or {}).get("review_state") or "draft"
    if state == "published":
        return (
            f"published at {when(version['published_at'])}, reviewed by "
            f"{inline(version['reviewer'])}"
        )
    if state == "in_review":
        asked = inline(version["review_requested_by"] or "someone")
        return f"in review since {when(version['review_requested_at'])} (asked by {asked})"
    return "draft"


def _section(add, title: str, level: str = "##") -> None:
    add("")
    add(f"{level} {title}")
    add("")


def _narrative(add, doc, key: str, *, always: bool = False, level: str = "##") -> None:
    section = next(s for s in doc["narrative"] if s["key"] == key)
    if not section["text"].strip():
        if always:
            _section(add, section["title"], level)
            add("Not written yet.")
        return
    _section(add, section["title"], level)
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
    add("")
    detected = f"Detected at {when(d['detected_at'])}: {d['how']}"
    if d["alert_name"]:
        detected += f", alert **{inline(d['alert_name'])}**"
    if d["delay_s"] is not None:
        side = "after" if d["delay_s"] >= 0 else "before"
        detected += f" ({duration(abs(d['delay_s']))} {side} the alarm first fired)"
    add(detected + ".")


def _impact(add, doc) -> None:
    i = doc["impact"]
    _section(add, "Impact")
    if i["sample_breach_s"] is None:
        add("- **Duration from the alarm's samples:** unknown (no sample over the threshold)")
    else:
        add(
            f"- **Duration from the alarm's samples:** {duration(i['sample_breach_s'])} over "
            f"the threshold, {when(i['sample_first_at'])} → {when(i['sample_last_at'])}"
        )
    slo = i["slo"]
    burned = (
        "none measured" if slo["burned_pct"] is None else f"{slo['burned_pct']:.1f} % of the budget"
    )
    add(
        f"- **SLO burn:** {burned} ({slo['objective_pct']:.1f} % over {slo['window_days']} days:"
        f" a budget of {duration(slo['budget_s'])})"
    )
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
    _section(add, "Resolution")
    r = doc["resolution"]
    if r["verified_at"]:
        resolved = (
            f"Fix verified at {when(r['verified_at'])}, {duration(r['to_verified_fix_s'])} "
            "after the investigation opened"
        )
    elif r["fix_applied_at"]:
        resolved = f"Fix applied at {when(r['fix_applied_at'])}, not verified"
    else:
        resolved = "No fix was recorded"
    if r["closed_at"]:
        resolved += f"; closed at {when(r['closed_at'])}"
    add(resolved + ".")
    _section(add, "Fix and verification", "###")
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
            holds = "yes" if c["holds"] else "no"
            if c["holds"] is None:
                held = c.get("held", "")
                holds = f"undecided: {inline(held)}" if held else "no data"
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
    _section(add, "Timeline (UTC)")
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
    add("| Action | Type | Priority | Owner | Due | Status |")
    add("|---|---|---|---|---|---|")
    for item in doc["action_items"]:
        add(
            f"| {inline(item['title'])} | {item['type']} | {item['priority'].upper()} | "
            f"{inline(item['owner'])} | {when(item['due'])} | {item['status']} |"
        )
