"""Prometheus HTTP API client for probes: instant and range queries, strict bounded parsing.

Everything goes through ``probes.net.afetch`` (SSRF guard, byte cap, deadline). Queries are
refused before sending when they could never succeed (oversized PromQL, more than 11,000
points per series, a base URL with path tricks). Prometheus explains failures in a JSON body
on HTTP 400/422/500/503; those become ``ProbeError`` with kind ``promql-<errorType>`` and the
server's own message, so the console shows what Prometheus said.

PromQL templates (from playbooks) are rendered by ``probes.promql``, which is pure text and
needs no client.
"""

from __future__ import annotations

import json
import math
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

from probes.net import FetchPolicy, FetchResult, ProbeClient, ProbeError, afetch, validate_url

MAX_PROMQL_BYTES = 4096
MAX_POINTS_PER_SERIES = 11_000  # Prometheus refuses (end - start) / step above this
MAX_SERIES = 10_000
MAX_MESSAGE_CHARS = 300
MAX_WARNINGS = 20
MIN_STEP_S = 0.001  # Prometheus's timestamp resolution
# The server-side evaluation timeout defaults to this share of the client's overall deadline,
# so Prometheus gives up (and says so) before the probe stops listening.
SERVER_TIMEOUT_SHARE = 0.8

# Statuses Prometheus answers with a JSON error envelope.
ERROR_STATUSES = frozenset({400, 422, 500, 503})
KNOWN_ERROR_TYPES = frozenset(
    {"bad_data", "timeout", "canceled", "execution", "internal", "unavailable", "not_found"}
)
TRANSIENT_ERROR_TYPES = frozenset({"timeout", "canceled", "unavailable", "internal"})
RESULT_TYPES = ("vector", "matrix", "scalar", "string")

_SEGMENT = re.compile(r"[A-Za-z0-9_~-][A-Za-z0-9._~-]*")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_SPECIAL_VALUES = {"NaN": math.nan, "+Inf": math.inf, "-Inf": -math.inf, "Inf": math.inf}


@dataclass(frozen=True)
class Series:
    """One time series: sorted ``(name, value)`` label pairs and ``(unix_s, value)`` points.

    A vector sample is a series with one point."""

    labels: tuple[tuple[str, str], ...]
    points: tuple[tuple[float, float], ...]

    def label(self, name: str, default: str | None = None) -> str | None:
        return dict(self.labels).get(name, default)

    def label_dict(self) -> dict[str, str]:
        return dict(self.labels)


@dataclass(frozen=True)
class QueryResult:
    """``result_type`` is vector, matrix, scalar or string. ``series`` holds vector and matrix
    results; ``scalar`` the value of a scalar result; ``string`` a string result's text."""

    result_type: str
    series: tuple[Series, ...] = ()
    scalar: float | None = None
    warnings: tuple[str, ...] = ()
    string: str | None = None


def single_value(result: QueryResult) -> float | None:
    """The one number a "one number" query (``sum(...)``, ``histogram_quantile(...)``) returns.

    None when the vector is empty (no data). NaN is returned as NaN (Prometheus's answer for,
    e.g., a quantile over a window without observations). More than one series, or a
    matrix/string result, means the query is not a one-number query: a permanent error that
    names the fix (aggregate the series).
    """
    if result.result_type == "scalar":
        return result.scalar
    if result.result_type != "vector":
        raise ProbeError(
            "promql-not-single",
            f"expected a vector or scalar, got a {result.result_type}",
            transient=False,
        )
    if not result.series:
        return None
    if len(result.series) > 1:
        raise ProbeError(
            "promql-not-single",
            f"expected one series, got {len(result.series)}; aggregate them (sum, max, ...)",
            transient=False,
        )
    return result.series[0].points[-1][1]


# --- requests -----------------------------------------------------------------------------


def api_url(base_url: str, endpoint: str) -> str:
    """``base_url`` + ``/api/v1/<endpoint>``, refusing bases that could steer the path.

    The base may carry a path prefix (``http://gw:9090/prometheus``) made of plain segments;
    query strings, fragments, percent-escapes, dot segments, empty segments and odd
    characters are refused, so the request always goes to ``<prefix>/api/v1/<endpoint>``.
    """
    if not isinstance(base_url, str) or not base_url:
        raise ProbeError("bad-url", "no Prometheus base URL", transient=False)
    if len(base_url) > 2048:
        raise ProbeError("bad-url", "the Prometheus base URL is too long", transient=False)
    if any(ord(ch) <= 32 or ord(ch) >= 127 for ch in base_url):
        raise ProbeError(
            "bad-url", "the Prometheus base URL has spaces or non-ASCII characters",
            transient=False,
        )  # fmt: skip
    parsed = validate_url(base_url)
    split = urllib.parse.urlsplit(base_url)
    if split.query or split.fragment or "?" in base_url or "#" in base_url:
        raise ProbeError(
            "bad-url", "the Prometheus base URL must not carry a query or fragment",
            transient=False,
        )  # fmt: skip
    path = split.path.rstrip("/")
    segments = path.split("/")[1:] if path else []
    if (path and not path.startswith("/")) or not all(_SEGMENT.fullmatch(s) for s in segments):
        raise ProbeError(
            "bad-url",
            "the Prometheus base URL path must be plain segments (no '..', '//', '%' or '\\')",
            transient=False,
        )
    netloc = split.netloc
    if parsed.userinfo or "@" in netloc:
        raise ProbeError("bad-url", "credentials in URLs are refused", transient=False)
    return f"{parsed.scheme}://{netloc}{path}/api/v1/{endpoint}"


def _check_promql(promql: str) -> None:
    if not isinstance(promql, str) or not promql.strip():
        raise ProbeError("bad-query", "empty PromQL", transient=False)
    size = len(promql.encode("utf-8", errors="surrogatepass"))
    if size > MAX_PROMQL_BYTES:
        raise ProbeError(
            "bad-query",
            f"PromQL is {size:,} bytes; the limit is {MAX_PROMQL_BYTES:,}",
            transient=False,
        )
    if "\0" in promql:
        raise ProbeError("bad-query", "PromQL contains a NUL character", transient=False)


def _finite(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ProbeError("bad-query", f"{name} must be a finite number", transient=False)
    return float(value)


def _server_timeout(policy: FetchPolicy, timeout_s: float | None) -> str:
    ceiling = policy.total_timeout * SERVER_TIMEOUT_SHARE
    seconds = ceiling if timeout_s is None else _finite("timeout_s", timeout_s)
    if seconds <= 0:
        raise ProbeError("bad-query", "timeout_s must be positive", transient=False)
    millis = max(1, round(min(seconds, ceiling) * 1000))
    return f"{millis}ms"


def _fmt_time(value: float) -> str:
    return f"{value:.3f}"


async def instant_query(
    client: ProbeClient,
    base_url: str,
    promql: str,
    policy: FetchPolicy,
    *,
    at: float | None = None,
    timeout_s: float | None = None,
) -> QueryResult:
    """``GET /api/v1/query``: evaluate ``promql`` at ``at`` (unix seconds; default: now on
    the server). ``timeout_s`` is passed to Prometheus as its own ``timeout`` (default and
    ceiling: 80 % of the policy's overall deadline)."""
    _check_promql(promql)
    params = {"query": promql}
    if at is not None:
        params["time"] = _fmt_time(_finite("at", at))
    params["timeout"] = _server_timeout(policy, timeout_s)
    return await _query(client, api_url(base_url, "query"), params, policy)


async def range_query(
    client: ProbeClient,
    base_url: str,
    promql: str,
    policy: FetchPolicy,
    *,
    start: float,
    end: float,
    step: float,
    timeout_s: float | None = None,
) -> QueryResult:
    """``GET /api/v1/query_range`` from ``start`` to ``end`` (unix seconds) every ``step``
    seconds. Refused before sending if a series could have more than 11,000 points (the
    limit Prometheus enforces)."""
    _check_promql(promql)
    start, end, step = _finite("start", start), _finite("end", end), _finite("step", step)
    if step < MIN_STEP_S:
        raise ProbeError("bad-query", f"step must be at least {MIN_STEP_S} s", transient=False)
    if end < start:
        raise ProbeError("bad-query", "end is before start", transient=False)
    if (end - start) / step > MAX_POINTS_PER_SERIES:
        raise ProbeError(
            "bad-query",
            f"{(end - start) / step:,.0f} steps exceed {MAX_POINTS_PER_SERIES:,} points per "
            "series; use a larger step",
            transient=False,
        )
    params = {
        "query": promql,
        "start": _fmt_time(start),
        "end": _fmt_time(end),
        "step": _fmt_time(step),
        "timeout": _server_timeout(policy, timeout_s),
    }
    return await _query(client, api_url(base_url, "query_range"), params, policy)


async def _query(
    client: ProbeClient, url: str, params: dict[str, str], policy: FetchPolicy
) -> QueryResult:
    query = urllib.parse.urlencode(params, quote_via=urllib.parse.quote, safe="")
    fetched = await afetch(client, f"{url}?{query}", policy, accept_status=ERROR_STATUSES)
    return parse_response(fetched)


# --- responses ----------------------------------------------------------------------------


def _truncate(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _malformed(why: str) -> ProbeError:
    return ProbeError("malformed", f"not a Prometheus API answer: {why}", transient=False)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"bare {name} is not JSON")


def _load(fetched: FetchResult) -> Any:
    try:
        text = fetched.body.decode("utf-8")
        return json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise _malformed("JSON nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise _malformed(f"invalid JSON ({_truncate(str(exc), 120)})") from None


def parse_response(fetched: FetchResult) -> QueryResult:
    """Turn an API answer (any status afetch returned) into a QueryResult or a ProbeError."""
    try:
        envelope = _load(fetched)
    except ProbeError:
        if fetched.status >= 400:  # a proxy's or load balancer's page, not Prometheus's
            transient = fetched.status >= 500 or fetched.status == 429
            raise ProbeError(
                "http-status", f"HTTP {fetched.status} without a Prometheus answer",
                transient=transient,
            ) from None  # fmt: skip
        raise
    if not isinstance(envelope, dict):
        raise _malformed("the body is not a JSON object")
    status = envelope.get("status")
    if status == "error":
        raise _api_error(envelope, fetched.status)
    if status != "success":
        raise _malformed(f"status is {_truncate(repr(status), 40)}")
    if fetched.status != 200:
        raise _malformed(f"HTTP {fetched.status} with status success")
    warnings = _strings(envelope.get("warnings"), "warnings") + _strings(
        envelope.get("infos"), "infos"
    )
    data = envelope.get("data")
    if not isinstance(data, dict):
        raise _malformed("data is not an object")
    result_type = data.get("resultType")
    result = data.get("result")
    if result_type in ("vector", "matrix"):
        series, extra = _series(result, result_type)
        return QueryResult(result_type, series=series, warnings=warnings + extra)
    if result_type == "scalar":
        _, value = _sample(result)
        return QueryResult("scalar", scalar=value, warnings=warnings)
    if result_type == "string":
        if not (isinstance(result, list) and len(result) == 2 and isinstance(result[1], str)):
            raise _malformed("string result is not [time, text]")
        _timestamp(result[0])
        return QueryResult("string", string=_truncate(result[1], 4096), warnings=warnings)
    raise _malformed(f"resultType {_truncate(repr(result_type), 40)}")


def _api_error(envelope: dict, http_status: int) -> ProbeError:
    error_type = envelope.get("errorType")
    message = envelope.get("error")
    if not isinstance(message, str) or not message:
        message = "Prometheus reported an error without a message"
    if isinstance(error_type, str) and error_type in KNOWN_ERROR_TYPES:
        kind = f"promql-{error_type}"
        transient = error_type in TRANSIENT_ERROR_TYPES or http_status == 503
    else:
        kind = "prometheus-error"
        transient = http_status >= 500 or http_status == 429
    return ProbeError(kind, _truncate(message), transient=transient)


def _strings(value: Any, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _malformed(f"{name} is not a list of strings")
    kept = tuple(_truncate(v) for v in value[:MAX_WARNINGS])
    if len(value) > MAX_WARNINGS:
        kept += (f"... and {len(value) - MAX_WARNINGS} more",)
    return kept


def _timestamp(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _malformed("a timestamp is not a finite number")
    return float(value)


def _value(value: Any) -> float:
    if isinstance(value, str):
        special = _SPECIAL_VALUES.get(value)
        if special is not None:
            return special
        if len(value) <= 64 and _NUMBER.fullmatch(value):
            return float(value)
    raise _malformed(f"sample value {_truncate(repr(value), 40)} is not a number string")


def _sample(pair: Any) -> tuple[float, float]:
    if not isinstance(pair, list) or len(pair) != 2:
        raise _malformed("a sample is not [time, value]")
    return _timestamp(pair[0]), _value(pair[1])


def _labels(metric: Any) -> tuple[tuple[str, str], ...]:
    if not isinstance(metric, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metric.items()
    ):
        raise _malformed("metric labels are not a string-to-string object")
    return tuple(sorted(metric.items()))


def _series(result: Any, result_type: str) -> tuple[tuple[Series, ...], tuple[str, ...]]:
    if not isinstance(result, list):
        raise _malformed(f"{result_type} result is not a list")
    if len(result) > MAX_SERIES:
        raise ProbeError(
            "too-large",
            f"{len(result):,} series exceed {MAX_SERIES:,}; aggregate or narrow the query",
            transient=False,
        )
    out: list[Series] = []
    histograms = 0
    for item in result:
        if not isinstance(item, dict):
            raise _malformed("a series is not an object")
        labels = _labels(item.get("metric", {}))
        if result_type == "vector":
            if "value" not in item:
                if "histogram" in item:  # native histogram sample: not supported (yet)
                    histograms += 1
                    continue
                raise _malformed("a vector sample has no value")
            points = (_sample(item["value"]),)
        else:
            values = item.get("values", [])
            if not isinstance(values, list):
                raise _malformed("series values are not a list")
            if "histograms" in item:
                histograms += 1
            points = tuple(_sample(v) for v in values)
            if not points and histograms:
                continue
        out.append(Series(labels, points))
    extra = (f"{histograms} native-histogram series ignored",) if histograms else ()
    return tuple(out), extra


# --- metadata endpoints (targets, series: ``probes.discovery``) ----------------------------


def api_data(fetched: FetchResult) -> Any:
    """The ``data`` of a non-query API answer (``/api/v1/targets``, ``/api/v1/series``),
    with the same envelope rules as :func:`parse_response`: Prometheus's own error becomes
    ``promql-<errorType>``, a proxy's page ``http-status``, anything else ``malformed``."""
    try:
        envelope = _load(fetched)
    except ProbeError:
        if fetched.status >= 400:
            transient = fetched.status >= 500 or fetched.status == 429
            raise ProbeError(
                "http-status", f"HTTP {fetched.status} without a Prometheus answer",
                transient=transient,
            ) from None  # fmt: skip
        raise
    if not isinstance(envelope, dict):
        raise _malformed("the body is not a JSON object")
    if envelope.get("status") == "error":
        raise _api_error(envelope, fetched.status)
    if envelope.get("status") != "success" or fetched.status != 200:
        raise _malformed(f"status is {_truncate(repr(envelope.get('status')), 40)}")
    return envelope.get("data")
