"""Prometheus text exposition (format 0.0.4) into an immutable structure.

Why not ``prometheus_client.parser.text_string_to_metric_families``: on a realistic 4-engine
vLLM V1 scrape (~170 KB, ~1,500 lines) it takes ~35 ms, and one 2-core worker must poll,
parse and store a thousand endpoints every 5 s. This parser is held to the same outputs by a
differential test (``tests/probes/test_exposition.py``) and runs ~5x faster
(``bench/probes_parse.py``).

Deliberate differences from prometheus_client:

* Sample names are kept as they appear on the wire (prometheus_client appends ``_total`` to
  counter samples whose TYPE line lacks it, and strips ``_total`` from family names).
* Values are always ``float`` (prometheus_client returns ``int`` for ``300``).
* Stricter: more than one timestamp token, quoted (UTF-8) metric or label names,
  ``__name__`` inside braces, and non-contiguous samples of an already-closed family are
  rejected (reserved ``__`` label names are rejected by both parsers).
* A ``# TYPE`` or ``# HELP`` line with no metric name (an excerpt cut after the keyword)
  is a comment, as in the Prometheus server's own text parser; prometheus_client raises
  on ``# TYPE`` (the differential test on real excerpts pins this one difference).
* Bounds on bytes, line length, series and labels per series (hostile endpoints).
* Histograms are validated; broken series groups are reported and left out of
  :attr:`Exposition.histograms`, never silently used.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

__all__ = [
    "DEFAULT_LIMITS",
    "Exposition",
    "ExpositionError",
    "ExpositionLimits",
    "ExpositionMalformed",
    "ExpositionTooLarge",
    "Family",
    "HistogramProblem",
    "HistogramSeries",
    "Labels",
    "Sample",
    "build_exposition",
    "decode_exposition",
    "label_value",
    "parse_exposition",
    "validate_histograms",
    "without_families",
]

Labels = tuple[tuple[str, str], ...]


class ExpositionError(ValueError):
    """Base of every rejection, so callers can record one failed scrape and move on."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.line = line
        super().__init__(f"line {line}: {message}" if line is not None else message)


class ExpositionTooLarge(ExpositionError):
    """The input exceeds a configured bound (bytes, line length, series, labels)."""


class ExpositionMalformed(ExpositionError):
    """The input is not valid text exposition (syntax, encoding, grouping)."""


@dataclass(frozen=True, slots=True)
class ExpositionLimits:
    max_bytes: int = 8 * 1024 * 1024
    max_line_bytes: int = 64 * 1024
    max_series: int = 200_000
    max_labels_per_series: int = 128


DEFAULT_LIMITS = ExpositionLimits()


class Sample(NamedTuple):
    name: str
    labels: Labels
    value: float
    timestamp: float | None = None


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    type: str
    help: str
    samples: tuple[Sample, ...]


@dataclass(frozen=True, slots=True)
class HistogramSeries:
    """One validated classic histogram: labels exclude ``le``; buckets sorted, last is +Inf."""

    family: str
    labels: Labels
    buckets: tuple[tuple[float, float], ...]
    count: float | None
    sum: float | None


@dataclass(frozen=True, slots=True)
class HistogramProblem:
    family: str
    labels: Labels
    reason: str


@dataclass(frozen=True)
class Exposition:
    families: Mapping[str, Family]
    histograms: Mapping[str, tuple[HistogramSeries, ...]]
    problems: tuple[HistogramProblem, ...] = field(default=())

    def family(self, name: str) -> Family | None:
        return self.families.get(name)

    def samples(self, family: str, sample_name: str | None = None) -> tuple[Sample, ...]:
        """Samples of ``family`` whose name is exactly ``sample_name`` (default: the family).

        Exact matching is the point: a prefix match on ``vllm:prompt_tokens`` would also pick
        up ``vllm:prompt_tokens_created`` (a ~1.7e9 timestamp) in V1 scrapes.
        """
        fam = self.families.get(family)
        if fam is None:
            return ()
        wanted = family if sample_name is None else sample_name
        return tuple(s for s in fam.samples if s.name == wanted)


def label_value(labels: Labels, name: str, default: str | None = None) -> str | None:
    for key, value in labels:
        if key == name:
            return value
    return default


_TYPES = {
    "counter": "counter",
    "gauge": "gauge",
    "histogram": "histogram",
    "summary": "summary",
    "untyped": "unknown",
    "unknown": "unknown",
    "info": "info",
    "stateset": "stateset",
    "gaugehistogram": "gaugehistogram",
}
_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_HEAD_RE = re.compile(r"[ \t]*(,?)[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*")
_LABEL_TAIL_RE = re.compile(r"[ \t]*,?[ \t]*")
_LABEL_PAIR_RE = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"')
_SEPARATOR_RE = re.compile(r"[ \t]*(?:,|$)")
_ESCAPE_RE = re.compile(r'\\[\\n"]')
_HELP_ESCAPE_RE = re.compile(r"\\[\\n]")
_UNESCAPE = {"\\\\": "\\", "\\n": "\n", '\\"': '"'}


def _unescape(match: re.Match[str]) -> str:
    return _UNESCAPE[match.group(0)]


def _parse_labels_escaped(block: str, lineno: int) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    pos, end = 0, len(block)
    while True:
        if pos >= end or _LABEL_TAIL_RE.fullmatch(block, pos):
            return pairs
        m = _LABEL_PAIR_RE.match(block, pos)
        if m is None or m.group(1).startswith("__"):
            raise ExpositionMalformed("invalid label set", lineno)
        value = m.group(2)
        if "\\" in value:
            value = _ESCAPE_RE.sub(_unescape, value)
        pairs.append((m.group(1), value))
        sep = _SEPARATOR_RE.match(block, m.end())
        if sep is None:
            raise ExpositionMalformed("invalid label set", lineno)
        pos = sep.end()
        if not sep.group(0).endswith(","):
            return pairs


def _label_keys(heads: tuple[str, ...], lineno: int) -> tuple[tuple[str, ...], bool] | None:
    """Validate the name parts between values once per distinct shape; None if invalid."""
    if heads[-1] and not _LABEL_TAIL_RE.fullmatch(heads[-1]):
        return None
    keys = []
    for i, head in enumerate(heads[:-1]):
        m = _LABEL_HEAD_RE.fullmatch(head)
        if m is None or bool(m.group(1)) != (i > 0) or m.group(2).startswith("__"):
            return None
        keys.append(m.group(2))
    return tuple(keys), keys == sorted(set(keys))


def _parse_labels(block: str, lineno: int, max_labels: int) -> Labels:
    pairs = _parse_labels_escaped(block, lineno)
    if len(pairs) > max_labels:
        raise ExpositionTooLarge(f"{len(pairs)} labels on one series (max {max_labels})", lineno)
    return _sorted_unique(pairs, lineno)


def _sorted_unique(pairs: list[tuple[str, str]], lineno: int) -> Labels:
    pairs.sort()
    for i in range(1, len(pairs)):
        if pairs[i][0] == pairs[i - 1][0]:
            raise ExpositionMalformed(f"duplicate label {pairs[i][0]!r}", lineno)
    return tuple(pairs)


def _decode(data: bytes | str, limits: ExpositionLimits) -> str:
    if isinstance(data, str):
        size = len(data) if data.isascii() else len(data.encode("utf-8", "surrogatepass"))
        if size > limits.max_bytes:
            raise ExpositionTooLarge(f"{size} bytes (max {limits.max_bytes})")
        return data
    if len(data) > limits.max_bytes:
        raise ExpositionTooLarge(f"{len(data)} bytes (max {limits.max_bytes})")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ExpositionMalformed("invalid UTF-8", line) from None


# One match per line, each starting where the previous ended (no scanning); the last
# alternative catches anything else so a bad line is reported, never skipped.
_LINE_RE = re.compile(
    r"[ \t]*(?:"
    r"(#[^\n]*)"
    r"|([a-zA-Z_:][a-zA-Z0-9_:]*)(?:[ \t]*\{([^\n]*)\}[ \t]*|[ \t]+)"
    r"([^\s{}]+)(?:[ \t]+([^\s{}]+))?[ \t\r]*"
    r"|([^\n]*))(?:\n|\Z)"
)


def _check_line_length(text: str, limits: ExpositionLimits) -> None:
    max_line = limits.max_line_bytes
    if len(text) > max_line:
        lengths = list(map(len, text.split("\n")))
        if max(lengths) > max_line:
            line = next(i for i, n in enumerate(lengths, 1) if n > max_line)
            raise ExpositionTooLarge(f"line longer than {max_line} bytes", line)


def decode_exposition(data: bytes | str, limits: ExpositionLimits = DEFAULT_LIMITS) -> str:
    """Decode and apply the byte and line bounds shared by both parsers."""
    text = _decode(data, limits)
    _check_line_length(text, limits)
    return text


_HELP_AT_LINE = "\n# HELP "


@functools.lru_cache(maxsize=1024)
def _foreign_line(name: str) -> re.Pattern[str]:
    """A line start in a ``# HELP name`` block that is not the family's own: neither its
    TYPE line nor a sample of it (plain, histogram or summary part, counter or creation
    stamp; labels or not), nor the end of the text. Cached: only names in a drop set get
    here, and a scrape repeats them every cycle."""
    stem = re.escape(name.removesuffix("_total"))
    return re.compile(
        rf"\n(?!# TYPE {re.escape(name)} |{stem}(?:_total|_bucket|_sum|_count|_created)?[{{ ]|\Z)"
    )


def _owns_every_line(block: str, name: str) -> bool:
    """Whether every line of one ``# HELP name`` block after the first is ``name``'s own,
    by one C-level scan (a per-line loop cost as much as the parse it saves). Anything else
    (a family declared without HELP, another comment, an indented or blank line) keeps
    the block, to be parsed."""
    return _foreign_line(name).search(block) is None


def without_families(text: str, drop: Container[str], family_of: Callable[[str], str] = str) -> str:
    """``text`` with the families in ``drop`` (compared by ``family_of(name)``, e.g. a base
    name without ``_total``) blanked out, line for line, before parsing.

    Why: a vLLM scrape is ~40 % runtime collectors and families Atlas knows it does not
    read, and parsing is the biggest share of a worker's CPU per endpoint. Blanking keeps
    every other line's number, so an error elsewhere is reported where it is. Only whole
    ``# HELP``-led blocks whose every line is the family's own are blanked; anything else
    (a family without HELP, a stray line) stays to be parsed and, if bad, rejected."""
    if "# HELP " not in text:
        return text
    # A newline in front, so the first family is a block like the others (dropped below).
    blocks = ("\n" + text).split(_HELP_AT_LINE)
    out = [blocks[0]]
    for block in blocks[1:]:
        named = _NAME_RE.match(block)
        name = named.group(0) if named and block[named.end() : named.end() + 1].isspace() else ""
        if name and family_of(name) in drop and _owns_every_line(block, name):
            out.append("\n" * (block.count("\n") + 1))
        else:
            out.append(_HELP_AT_LINE + block)
    return "".join(out)[1:]


def _shape(heads: tuple[str, ...], lineno: int, max_labels: int) -> tuple[tuple[str, ...], bool]:
    shape = _label_keys(heads, lineno)
    if shape is None:
        raise ExpositionMalformed("invalid label set", lineno)
    if len(shape[0]) > max_labels:
        raise ExpositionTooLarge(f"{len(shape[0])} labels on one series (max {max_labels})", lineno)
    return shape


def parse_exposition(data: bytes | str, limits: ExpositionLimits = DEFAULT_LIMITS) -> Exposition:
    """Parse one scrape body; raise :class:`ExpositionError` rather than guess."""
    text = decode_exposition(data, limits)
    order: list[tuple[str, str, str, list[Sample]]] = []
    cur_name = ""
    cur_type = "unknown"
    cur_help = ""
    cur_samples: list[Sample] = []
    allowed: frozenset[str] | tuple[str, ...] = ()
    seen: set[str] = set()
    # Label names between the quoted values ("shape") repeat on every line of a family,
    # so they are validated once per parse; values are then a C-level split away.
    shapes: dict[tuple[str, ...], tuple[tuple[str, ...], bool]] = {}
    series = 0
    max_labels = limits.max_labels_per_series
    new_sample = tuple.__new__  # skips NamedTuple's Python-level __new__ (2x cheaper)

    def close() -> None:
        if cur_name:
            order.append((cur_name, cur_type, cur_help, cur_samples))

    def open_family(name: str, lineno: int) -> None:
        if name in seen:
            raise ExpositionMalformed(f"family {name!r} appears twice", lineno)
        seen.add(name)

    for lineno, (comment, name, block, value, ts, other) in enumerate(_LINE_RE.findall(text), 1):
        if name:
            if not block:
                labels: Labels = ()
            elif "\\" in block:
                labels = _parse_labels(block, lineno, max_labels)
            else:
                parts = block.split('"')
                heads = tuple(parts[0::2])
                shape = shapes.get(heads)
                if shape is None:
                    shape = shapes[heads] = _shape(heads, lineno, max_labels)
                if shape[1]:
                    labels = tuple(zip(shape[0], parts[1::2], strict=False))
                else:
                    labels = _sorted_unique(list(zip(shape[0], parts[1::2], strict=False)), lineno)
            series += 1
            # float() alone would also accept "1_000" and non-ASCII digits.
            if "_" in value or not value.isascii():
                raise ExpositionMalformed("invalid value", lineno)
            try:
                if not ts:
                    sample = new_sample(Sample, (name, labels, float(value), None))
                elif "_" in ts or not ts.isascii():
                    raise ValueError
                else:
                    sample = new_sample(Sample, (name, labels, float(value), float(ts) / 1000))
            except ValueError:
                raise ExpositionMalformed("invalid value", lineno) from None
            if name in allowed:
                cur_samples.append(sample)
                continue
            # An untyped sample outside the current family: prometheus_client starts an
            # "unknown" family for it, and so do we (grouping consecutive ones by name).
            close()
            open_family(name, lineno)
            cur_name, cur_type, cur_help, cur_samples = name, "unknown", "", [sample]
            allowed = (name,)
        elif comment:
            parts = comment.strip().split(None, 3)
            if len(parts) < 3 or parts[0] != "#" or parts[1] not in ("HELP", "TYPE"):
                continue
            candidate = parts[2]
            if not _NAME_RE.fullmatch(candidate):
                raise ExpositionMalformed(f"invalid metric name {candidate[:40]!r}", lineno)
            if parts[1] == "HELP":
                if candidate != cur_name:
                    close()
                    open_family(candidate, lineno)
                    cur_name, cur_type, cur_samples = candidate, "unknown", []
                    allowed = (candidate,)
                doc = parts[3] if len(parts) == 4 else ""
                cur_help = _HELP_ESCAPE_RE.sub(_unescape, doc) if "\\" in doc else doc
            else:
                if len(parts) < 4 or parts[3] not in _TYPES:
                    raise ExpositionMalformed("invalid TYPE line", lineno)
                if candidate != cur_name:
                    close()
                    open_family(candidate, lineno)
                    cur_name, cur_help, cur_samples = candidate, "", []
                cur_type = _TYPES[parts[3]]
                if cur_type == "histogram":
                    allowed = frozenset(
                        (candidate + "_bucket", candidate + "_sum", candidate + "_count")
                    )
                elif cur_type == "summary":
                    allowed = frozenset((candidate, candidate + "_sum", candidate + "_count"))
                else:
                    allowed = (candidate,)
        elif other and other.strip():
            raise ExpositionMalformed("invalid sample line", lineno)
    close()
    if series > limits.max_series:
        raise ExpositionTooLarge(f"{series} series (max {limits.max_series})")
    return build_exposition(
        Family(name, typ, help_text, tuple(samples)) for name, typ, help_text, samples in order
    )


def build_exposition(families: Iterable[Family]) -> Exposition:
    """Index families and validate their histograms (shared with the reference parser)."""
    fams = {f.name: f for f in families}
    histograms, problems = validate_histograms(fams.values())
    return Exposition(MappingProxyType(fams), MappingProxyType(histograms), tuple(problems))


def validate_histograms(
    families: Iterable[Family],
) -> tuple[dict[str, tuple[HistogramSeries, ...]], list[HistogramProblem]]:
    """Keep only complete, consistent histogram groups; report the rest.

    A group is the family's samples sharing labels minus ``le``. It must have a ``+Inf``
    bucket, parseable unique ``le`` values, non-decreasing cumulative counts, and a
    ``_count`` equal to the ``+Inf`` bucket when both exist: a truncated scrape (the
    aibrix V0 capture) would otherwise yield quantiles from a partial distribution.
    """
    out: dict[str, tuple[HistogramSeries, ...]] = {}
    problems: list[HistogramProblem] = []
    for fam in families:
        if fam.type != "histogram":
            continue
        bucket_name, sum_name, count_name = (
            fam.name + "_bucket",
            fam.name + "_sum",
            fam.name + "_count",
        )
        groups: dict[Labels, list] = {}
        for s in fam.samples:
            if s.name == bucket_name:
                le = None
                rest = []
                for pair in s.labels:
                    if pair[0] == "le":
                        le = pair[1]
                    else:
                        rest.append(pair)
                key = tuple(rest)
                g = groups.setdefault(key, [[], None, None, None])
                if le is None:
                    g[3] = g[3] or "bucket without le label"
                    continue
                try:
                    bound = float(le)
                except ValueError:
                    g[3] = g[3] or f"unparseable le {le[:40]!r}"
                    continue
                g[0].append((bound, s.value))
            else:
                g = groups.setdefault(s.labels, [[], None, None, None])
                if s.name == sum_name:
                    g[1] = s.value
                elif s.name == count_name:
                    g[2] = s.value
        good: list[HistogramSeries] = []
        for labels, (buckets, total, count, error) in groups.items():
            reason = error or _bucket_problem(buckets, count)
            if reason:
                problems.append(HistogramProblem(fam.name, labels, reason))
                continue
            buckets.sort()
            good.append(HistogramSeries(fam.name, labels, tuple(buckets), count, total))
        if good:
            out[fam.name] = tuple(good)
    return out, problems


def _bucket_problem(buckets: list[tuple[float, float]], count: float | None) -> str | None:
    if not buckets:
        return "no buckets"
    ordered = sorted(buckets)
    if ordered[-1][0] != math.inf:
        return "no +Inf bucket (truncated scrape?)"
    prev_bound, prev_count = None, -math.inf
    for bound, value in ordered:
        if math.isnan(bound) or math.isnan(value):
            return "NaN bucket"
        if bound == prev_bound:
            return f"duplicate bucket le={bound}"
        if value < prev_count:
            return f"cumulative count decreases at le={bound}"
        prev_bound, prev_count = bound, value
    if count is not None and count != ordered[-1][1]:
        return f"_count {count} != +Inf bucket {ordered[-1][1]}"
    return None
