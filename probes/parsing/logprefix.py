"""Where a log record's message starts, and the timestamps around it.

Real engine logs arrive wrapped in whatever carried them: the container runtime
(``kubectl logs --timestamps`` / ``docker logs -t``: an RFC3339Nano stamp, the CRI file
format's ``stdout F``), journald or syslog (``Jan 05 08:00:01 host vllm[12]:``), compose
(``vllm-1  | ``), ``kubectl logs --prefix`` (``[pod/x/c] ``), mpirun tags, wrappers that
print ``[date] LEVEL``, and pastes that add Markdown bullets (``- ``) or quotes (``> ``).
Inside them sits the engine's own head: vLLM's ``(EngineCore_DP0 pid=241) INFO 02-12
19:50:09 [file.py:123]`` (with or without the process part, the opening bracket, a year,
Ray's ``, ip=``), SGLang's ``[2025-01-15 10:23:45 TP0]`` / ``[10:23:45 TP0]`` /
``[10:23:45]`` / ``[TP0]`` (a lost opening bracket too), Python logging's ``2026-03-08
16:44:29,692 - INFO - file.py:262 -`` and uvicorn's ``INFO:     ``.

:func:`split_record` peels those layers (a bounded number of them) and returns the
message; :func:`split_glued` cuts a physical line where a viewer glued the next record
onto it. Both are pure and linear in the line length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

__all__ = ["Head", "infer_year", "split_glued", "split_record"]

MAX_LAYERS = 8
PREFIX_SCAN = 1024  # a prefix chain is never longer than this

_LEVEL = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)"
_RFC3339 = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:?\d\d)"

# Outer layers, tried in turn until none matches. Each keeps the single space that
# separates it from what follows: indentation after it is the message's own (tracebacks).
_BULLET = re.compile(r"[ \t]{0,8}(?:[-*+\u2022]|\d{1,3}[.)])[ \t]+(?=\S)")
_QUOTE = re.compile(r">[ \t]?")
_SYSLOG = re.compile(
    rf"(?:(?P<mon>[A-Z][a-z]{{2}}) +(?P<day>\d{{1,2}}) (?P<hms>\d\d:\d\d:\d\d)|(?P<iso>{_RFC3339}))"
    r" [\w.\-]{1,64} [\w.\-/@]{1,64}(?:\[\d+\])?: "
)
_CONTAINER = re.compile(rf"(?P<iso>{_RFC3339}) (?:(?:stdout|stderr) [FP] )?")
_COMPOSE = re.compile(r"[\w.\-]{1,64}[ \t]+\| ")
_KUBECTL = re.compile(r"\[pod/[^\]\s]{1,200}\] ")
_MPIRUN = re.compile(r"\[\d{1,6},\d{1,6}\]<(?:stdout|stderr)>: ?")
_PROCESS = re.compile(r"\((?P<proc>[^()\s][^()]{0,63}?) pid=\d+(?:, ip=[^()\s]{1,64})?\) ")
_WRAPPER = re.compile(
    r"\[(?P<date>\d{4}-\d\d-\d\d)[ T](?P<hms>\d\d:\d\d:\d\d)(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?\] "
    rf"(?P<level>{_LEVEL})\b:? +"
)
_MONTHS = {
    m: i
    for i, m in enumerate(
        ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"], 1
    )
}

# Engine heads: the message is always the rest of the line.
_VLLM = re.compile(
    rf"(?P<level>{_LEVEL}) (?:(?P<year>\d{{4}})-)?(?P<md>\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)"
    r"(?:[.,]\d+)?(?: \[?(?P<src>[^\s\[\]]+:\d+)\]?)? (?P<msg>.*)$",
    re.S,
)
_SGLANG = re.compile(
    r"\[?(?:(?P<date>\d{4}-\d\d-\d\d) )?(?P<hms>\d\d:\d\d:\d\d)(?:[.,]\d+)?"
    r"(?: (?P<proc>[^\[\]]{1,64}?))?\] (?P<msg>.*)$",
    re.S,
)
_SGLANG_RANK = re.compile(r"\[(?P<proc>(?:(?:DP|PP|TP|EP|CP)\d+ ?){1,5})\] (?P<msg>.*)$", re.S)
_PYLOG = re.compile(
    r"(?P<date>\d{4}-\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:[.,]\d+)? - (?:[\w.\-]{1,64} - )?"
    rf"(?P<level>{_LEVEL}) - (?:[\w.\-]+:\d+ - )?(?P<msg>.*)$",
    re.S,
)
_UVICORN = re.compile(rf"(?P<level>{_LEVEL}): +(?P<msg>.*)$", re.S)

# A record head glued onto the end of the previous record (a paste that lost newlines):
# specific enough (date, time and [file:line]) to cut at even after a space.
_GLUE = re.compile(
    r"(?=((?:\([^()\s][^()]{0,63} pid=\d+(?:, ip=[^()\s]{1,64})?\) )?"
    rf"{_LEVEL} (?:\d{{4}}-)?\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \[?[\w./\-]+:\d+\]"
    r"|\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?: [^\[\]]{1,64})?\] "
    rf"|{_RFC3339} ))"
)


@dataclass(frozen=True, slots=True)
class Head:
    """A record split into its message and what its prefixes said."""

    msg: str
    timestamp: datetime | None  # the engine's own clock, naive (engines print no zone)
    received_at: datetime | None  # the collector's stamp (container runtime), UTC
    level: str | None
    process: str | None
    flavour: str | None  # "vllm" | "sglang" | "python" | None (no engine head)
    prefixed: bool  # any layer at all was recognised


def infer_year(month: int, day: int, now: datetime) -> int:
    """Logs omit the year: a date later in the year than ``now`` is from last year."""
    return now.year - 1 if (month, day) > (now.month, now.day) else now.year


def _at(year: int, month: int, day: int, hms: str) -> datetime | None:
    try:
        return datetime(year, month, day, int(hms[:2]), int(hms[3:5]), int(hms[6:8]))
    except ValueError:
        return None


def _nearest(month: int, day: int, hms: str, ref: datetime) -> datetime | None:
    """The year that puts month-day closest to a stamp the line itself carries."""
    found = [t for y in (ref.year - 1, ref.year, ref.year + 1) if (t := _at(y, month, day, hms))]
    return min(found, key=lambda t: abs(t - ref)) if found else None


def _without_year(month: int, day: int, hms: str, now: datetime) -> datetime | None:
    year = infer_year(month, day, now)
    for y in range(year, year - 8, -1):  # 02-29 belongs to the latest leap year
        if (t := _at(y, month, day, hms)) is not None or (month, day) != (2, 29):
            return t
    return None


def _rfc3339(text: str) -> datetime | None:
    text = text.replace("Z", "+00:00")
    if "." in text:  # nanoseconds: Python keeps six digits
        head, rest = text.split(".", 1)
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{rest[:digits][:6].ljust(6, '0')}{rest[digits:]}"
    if text[-5] in "+-" and text[-3] != ":":
        text = f"{text[:-2]}:{text[-2:]}"
    try:
        return datetime.fromisoformat(text).astimezone(UTC)
    except ValueError:
        return None


def _date(text: str, hms: str) -> datetime | None:
    return _at(int(text[:4]), int(text[5:7]), int(text[8:10]), hms)


def split_record(line: str, now: datetime) -> Head:
    """Peel the prefixes off one record; the message is the rest of the line.

    ``now`` (naive or aware) resolves dates without a year when nothing in the line does.
    """
    rest = line
    received: datetime | None = None
    outer: datetime | None = None  # naive, for years and dates the engine head lacks
    level = process = None
    prefixed = False
    now_naive = now.astimezone(UTC).replace(tzinfo=None) if now.tzinfo else now
    for _ in range(MAX_LAYERS):
        if (m := _SYSLOG.match(rest)) is not None:
            if m["iso"]:
                received = _rfc3339(m["iso"])
                outer = received.replace(tzinfo=None) if received else outer
            elif (mon := _MONTHS.get(m["mon"])) is not None:
                outer = _without_year(mon, int(m["day"]), m["hms"], now_naive) or outer
        elif (m := _CONTAINER.match(rest)) is not None:
            received = _rfc3339(m["iso"])
            outer = received.replace(tzinfo=None) if received else outer
        elif (m := _PROCESS.match(rest)) is not None:
            process = m["proc"]
        elif (m := _WRAPPER.match(rest)) is not None:
            outer = _date(m["date"], m["hms"]) or outer
            level = m["level"]
        elif not (
            (m := _KUBECTL.match(rest))
            or (m := _MPIRUN.match(rest))
            or (m := _COMPOSE.match(rest))
            or (not prefixed and (m := _BULLET.match(rest)))
            or (not prefixed and (m := _QUOTE.match(rest)))
        ):
            break
        prefixed = True
        rest = rest[m.end() :]
    return _engine_head(rest, now_naive, outer, received, level, process, prefixed)


def _engine_head(
    rest: str,
    now: datetime,
    outer: datetime | None,
    received: datetime | None,
    level: str | None,
    process: str | None,
    prefixed: bool,
) -> Head:
    if (m := _VLLM.match(rest)) is not None:
        month, day = int(m["md"][:2]), int(m["md"][3:])
        if m["year"]:
            ts = _at(int(m["year"]), month, day, m["hms"])
        elif outer is not None:
            ts = _nearest(month, day, m["hms"], outer)
        else:
            ts = _without_year(month, day, m["hms"], now)
        return Head(m["msg"], ts, received, m["level"], process, "vllm", True)
    if (m := _PYLOG.match(rest)) is not None:
        ts = _date(m["date"], m["hms"])
        return Head(m["msg"], ts, received, m["level"], process, "python", True)
    if (m := _SGLANG.match(rest)) is not None:
        if m["date"]:
            ts = _date(m["date"], m["hms"])
        else:  # time only: the day of the stamp around it, or of ``now``
            ref = outer or now
            ts = _at(ref.year, ref.month, ref.day, m["hms"])
            if ts is not None and outer is None and ts > now:
                ts -= timedelta(days=1)
        return Head(m["msg"], ts, received, level, m["proc"] or process, "sglang", True)
    if (m := _SGLANG_RANK.match(rest)) is not None:
        return Head(m["msg"], outer, received, level, m["proc"].strip(), "sglang", True)
    if (m := _UVICORN.match(rest)) is not None:
        return Head(m["msg"], outer, received, m["level"], process, None, True)
    return Head(rest, outer, received, level, process, None, prefixed)


def _body_offset(text: str, now: datetime) -> int:
    """Where the first record's message starts (its prefixes end)."""
    return len(text) - len(split_record(text, now).msg)


def split_glued(line: str, now: datetime) -> list[str]:
    """Cut a physical line before every record head glued into it; never join two.

    ``...Prefix cache hit rate: 0.0%INFO 07-28 06:41:19 [loggers.py:118] Engine 000: ...``
    is two records. A head inside the first record's own prefix chain (a container stamp
    followed by vLLM's head) is not a cut.
    """
    starts = [m.start() for m in _GLUE.finditer(line)]
    if not starts:
        return [line]
    out: list[str] = []
    start, i = 0, 0
    while True:
        body = start + _body_offset(line[start : start + PREFIX_SCAN], now)
        while i < len(starts) and (starts[i] <= start or starts[i] < body):
            i += 1
        if i == len(starts):
            out.append(line[start:])
            return out
        out.append(line[start : starts[i]])
        start = starts[i]
