"""What an investigation's search document says, and how excerpts of it are shown.

Pure functions over strings: the caller (``review.indexing``) fetches the rows.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from investigations.causes import CAUSES
from investigations.playbook import PlaybookError, get_playbook

# A document is bounded: past this, text is not searchable (PostgreSQL also caps a
# tsvector at 1 MB). Narratives alone may hold 6 x 20,000 characters.
TITLE_MAX_CHARS = 1_000
CAUSE_MAX_CHARS = 2_000
BODY_MAX_CHARS = 200_000
# Markers ts_headline puts around matches; stripped from stored text so nobody can forge one.
MARK_START = "\x02"
MARK_STOP = "\x03"
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SPACES = re.compile(r"[ \t]+")


@dataclass(frozen=True)
class DocumentText:
    title: str
    cause: str
    body: str


def clean(text: object, limit: int) -> str:
    """Control characters (NUL is refused by PostgreSQL; STX/ETX are our highlight markers)
    become spaces; the result is at most ``limit`` characters."""
    if not isinstance(text, str):
        return ""
    return _SPACES.sub(" ", _CONTROL.sub(" ", text[: limit * 2])).strip()[:limit]


def cause_text(root_cause: str, symptom: str) -> str:
    """The root cause as people search for it: its key, what the cause is, and the
    hypothesis title the symptom's playbook gives it."""
    if not root_cause:
        return ""
    parts = [root_cause, CAUSES.get(root_cause, "")]
    with contextlib.suppress(PlaybookError, KeyError):
        parts.append(get_playbook(symptom).node(root_cause).title)
    return clean(". ".join(p for p in parts if p), CAUSE_MAX_CHARS)


def compose(
    *,
    title: str,
    root_cause: str,
    symptom: str,
    narratives: Iterable[str] = (),
    reasons: Iterable[str] = (),
    notes: Iterable[str] = (),
    override: str = "",
    comments: Iterable[str] = (),
) -> DocumentText:
    body_parts = [*narratives, *reasons, *notes, override, *comments]
    body = "\n".join(c for c in (clean(p, BODY_MAX_CHARS) for p in body_parts) if c)
    return DocumentText(
        title=clean(title, TITLE_MAX_CHARS),
        cause=cause_text(root_cause, symptom),
        body=body[:BODY_MAX_CHARS],
    )


def render_marked(text: str) -> SafeString:
    """A ts_headline result (matches between MARK_START and MARK_STOP) as safe HTML:
    everything escaped, then the markers turned into <mark>."""
    html = escape(text).replace(MARK_START, "<mark>").replace(MARK_STOP, "</mark>")
    if html.count("<mark>") != html.count("</mark>"):  # a fragment cut inside a match
        html = html.replace("<mark>", "").replace("</mark>", "")
    return mark_safe(html)  # noqa: S308 - escaped above; only our own tags are added


def plain_excerpt(body: str, terms: Iterable[str], width: int = 90) -> SafeString:
    """The fallback (no ts_headline) excerpt: the text around the first term found, with
    every occurrence of any term marked. Case-insensitive, no stemming."""
    words = [t for t in terms if t]
    if not body or not words:
        return mark_safe("")
    lowered = body.lower()
    hits = [i for i in (lowered.find(w.lower()) for w in words) if i >= 0]
    if not hits:
        return mark_safe("")
    start = max(0, min(hits) - width)
    end = min(len(body), min(hits) + width)
    snippet = body[start:end]
    pattern = re.compile("|".join(re.escape(w) for w in words), re.IGNORECASE)
    marked = pattern.sub(lambda m: f"{MARK_START}{m.group(0)}{MARK_STOP}", snippet)
    prefix = "… " if start else ""
    suffix = " …" if end < len(body) else ""
    return render_marked(f"{prefix}{marked}{suffix}")
