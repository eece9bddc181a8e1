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
"""

from __future__ import annotations

import re
from typing import Any

from django.http import QueryDict

REPLACEMENT = "\ufffd"
UNSAFE = re.compile("[\x00\ud800-\udfff]")


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
