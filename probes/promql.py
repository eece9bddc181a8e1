"""PromQL templating: ``${name}`` placeholders filled safely for where they stand.

Pure text, no I/O: the Prometheus client (``probes.promapi``), target discovery and the
alert rules a confirmed cause becomes (``investigations.gate``) all render their queries
here, so what a playbook's template may hold is decided in one place.
"""

from __future__ import annotations

import math
import re
from typing import Any

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_DURATION = re.compile(r"[0-9]+(?:ms|s|m|h|d|w|y)")
_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(text: str, quote: str) -> str:
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch == quote:
            out.append("\\" + quote)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def _number(name: str, value: Any) -> str | None:
    if isinstance(value, bool):
        raise ValueError(f"parameter {name!r}: booleans are not PromQL values")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"parameter {name!r}: {value!r} is not a finite number")
        return repr(value)
    return None


def _render_code(name: str, value: Any) -> str:
    number = _number(name, value)
    if number is not None:
        return number
    if isinstance(value, str) and _DURATION.fullmatch(value):
        return value
    raise ValueError(
        f"parameter {name!r} sits outside a string literal, so it must be a number or a "
        f"duration like 5m (got {value!r}); put label values inside quotes"
    )


def _render_string(name: str, value: Any, quote: str) -> str:
    number = _number(name, value)
    if number is not None:
        return number
    if not isinstance(value, str):
        raise ValueError(f"parameter {name!r}: {type(value).__name__} is not a label value")
    if quote == "`":
        if "`" in value:
            raise ValueError(f"parameter {name!r}: a backtick cannot appear in a raw string")
        return value
    return _escape(value, quote)


def render_promql(template: str, **params: Any) -> str:
    """Fill ``${name}`` placeholders in a PromQL template, safely for their position.

    Syntax: ``${name}`` (``name`` an identifier). ``${`` never occurs in valid PromQL outside
    string literals, and PromQL's own braces (``{job="x"}``) and Python-style ``{name}`` are
    left alone, so templates read like the query they produce::

        render_promql(
            'histogram_quantile(0.95, sum by (le) '
            '(rate(router_forward_duration_seconds_bucket{job="${job}"}[${window}])))',
            job="router", window="5m",
        )

    Where the placeholder sits decides what it may hold:

    * inside a quoted string literal (``"..."`` or ``'...'``): any label value, escaped for
      that literal (backslash, the quote, newline and other control characters), so a value
      such as ``"} or vector(1) #`` stays a label value; numbers are rendered as text. In a
      raw ```...``` literal the value may not contain a backtick. Values are matched
      literally by ``=``/``!=``; in ``=~``/``!~`` matchers regex metacharacters keep their
      meaning (escape them with ``re.escape`` first if that is not wanted).
    * anywhere else: an int/float (finite, not bool) or a duration ``^[0-9]+(ms|s|m|h|d|w|y)$``.
      Anything else raises, so no text can add PromQL operators.

    Raises ValueError for a placeholder without a parameter, a parameter without a
    placeholder, a ``${`` that does not start a placeholder, an unterminated string literal,
    or a value not allowed at its position.
    """
    out: list[str] = []
    used: set[str] = set()
    quote: str | None = None  # the open string literal's quote, if any
    i, n = 0, len(template)
    while i < n:
        ch = template[i]
        if ch == "$" and template.startswith("${", i):
            match = _PLACEHOLDER.match(template, i)
            if not match:
                raise ValueError(f"'${{' at offset {i} does not start a ${{name}} placeholder")
            name = match.group(1)
            if name not in params:
                raise ValueError(f"no value for placeholder ${{{name}}}")
            used.add(name)
            value = params[name]
            out.append(
                _render_code(name, value) if quote is None else _render_string(name, value, quote)
            )
            i = match.end()
            continue
        if quote is None:
            if ch in "\"'`":
                quote = ch
            elif ch == "#":  # a comment runs to the end of the line: copy it verbatim
                end = template.find("\n", i)
                end = n if end == -1 else end
                comment = template[i:end]
                if "${" in comment:
                    raise ValueError("placeholders are not allowed in PromQL comments")
                out.append(comment)
                i = end
                continue
        elif ch == "\\" and quote != "`":
            out.append(template[i : i + 2])
            i += 2
            continue
        elif ch == quote:
            quote = None
        out.append(ch)
        i += 1
    if quote is not None:
        raise ValueError("the template has an unterminated string literal")
    unknown = sorted(set(params) - used)
    if unknown:
        raise ValueError(f"parameters without a placeholder: {', '.join(unknown)}")
    return "".join(out)
