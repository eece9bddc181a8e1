"""Text from outside, made storable before anything stores it.

PostgreSQL refuses a string with U+0000 in it, and neither database can encode a lone
surrogate (``"\\ud800"`` is valid JSON, and valid in a Python ``str``, but not UTF-8): one
such character in an alert label, an API reason or a form field was a 500, and in an
Alertmanager batch it made Alertmanager retry the whole batch (issue 19.5). Both are
replaced by U+FFFD, the character that says "something unreadable was here", so the text
stays evidence (its length and the rest of it kept) and the same input always maps to the
same stored text (fingerprints still deduplicate).

It lives in the bottom layer so that every door uses the same rule: the JSON API's body
parser (investigations.api) and the middleware that cleans query strings and form posts
(atlas_console.security.SafeTextMiddleware).

Text from outside, made drawable: plotly.js renders a subset of HTML in every string it
draws (trace names, category ticks, hover labels, annotations), links included, so a
Chrome-trace step named ``<a href="https://...">Session expired: sign in again</a>`` was a
clickable phishing link on the artifact page (issue 19.8). ``plain`` is the one rule every
chart applies to probe- and artifact-sourced strings (``artifacts.charts``,
``investigations.charts``); ``plain_figure`` applies it to a whole figure.
"""

from __future__ import annotations

import re
from typing import Any

from django.http import QueryDict

REPLACEMENT = "\ufffd"
UNSAFE = re.compile("[\x00\ud800-\udfff]")
# Every tag plotly.js knows starts with "<"; ">" goes too so no half of one survives.
MARKUP = str.maketrans({"<": "(", ">": ")"})
# Keys whose strings the code writes itself, as plotly templates ("<extra></extra>").
AUTHORED_KEYS = frozenset({"hovertemplate", "texttemplate"})


def safe_text(value: str) -> str:
    """``value`` with every NUL and lone surrogate replaced by U+FFFD."""
    return UNSAFE.sub(REPLACEMENT, value)


def safe_json(value: Any) -> Any:
    """A parsed JSON document with every string in it (object keys too) made safe.

    Recursive like ``json.loads`` itself, so a document json could nest is walked; the
    caller maps RecursionError to a refusal as it does for the parser's own."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {safe_text(k): safe_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [safe_json(v) for v in value]
    return value


def safe_querydict(data: QueryDict) -> QueryDict:
    """``data`` itself when nothing in it is unsafe (the usual case), else a cleaned copy."""
    if not any(UNSAFE.search(k) or any(UNSAFE.search(v) for v in vs) for k, vs in data.lists()):
        return data
    cleaned = QueryDict(mutable=True, encoding=data.encoding)
    for key, values in data.lists():
        cleaned.setlist(safe_text(key), [safe_text(v) for v in values])
    cleaned._mutable = False
    return cleaned


def plain(value: object, limit: int = 240) -> str:
    """``value`` as chart text: no markup plotly.js would render, at most ``limit`` long.

    Angle brackets become parentheses rather than being dropped, so the text still reads
    as what the source sent (evidence), only inert."""
    return safe_text(str(value)).translate(MARKUP)[:limit]


def plain_figure(value: Any, limit: int = 240) -> Any:
    """A plotly figure (or any part of one) with ``plain`` applied to every string in it,
    except the templates under ``AUTHORED_KEYS``, which the code writes and which need
    plotly's own tags. For figures whose every other string is fixed text or comes from
    outside; a figure with authored comparisons (``>=``) applies ``plain`` to the parts
    that came from outside."""
    if isinstance(value, str):
        return plain(value, limit)
    if isinstance(value, dict):
        return {k: v if k in AUTHORED_KEYS else plain_figure(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_figure(v, limit) for v in value]
    return value
