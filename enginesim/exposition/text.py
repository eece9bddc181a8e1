"""Prometheus text exposition, written the way prometheus_client 0.2x writes it.

Labels are sorted by name (with `le` in its sorted place), floats use prometheus_client's
`floatToGoString`, counters carry `_total`, and `_created` families follow their parent when the
engine is in single-process mode (vLLM V1). Multiprocess mode (vLLM V0 multiproc, SGLang) drops
`_created` and prints `_sum` before the buckets.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from prometheus_client.utils import floatToGoString

from enginesim.histogram import Histogram

Labels = Sequence[tuple[str, str]]


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def label_str(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(labels)) + "}"


def fnum(v: float) -> str:
    """floatToGoString, with a fast path for the small integers most samples are."""
    if type(v) is int and -1_000_000 < v < 1_000_000:
        return f"{v}.0"
    return floatToGoString(v)


_PREFIX_CACHE: dict[tuple[str, tuple[tuple[str, str], ...], tuple[float, ...]], tuple] = {}
_PREFIX_CACHE_MAX = 100_000


def _hist_prefixes(name: str, labels: Labels, bounds: tuple[float, ...]) -> tuple:
    """Pre-rendered `name_bucket{…le=…}` / `_count` / `_sum` heads (labels repeat every scrape)."""
    key = (name, tuple(labels), bounds)
    hit = _PREFIX_CACHE.get(key)
    if hit is not None:
        return hit
    base = list(labels)
    ls = label_str(base)
    buckets = tuple(
        f"{name}_bucket{label_str([*base, ('le', floatToGoString(b))])} "
        for b in (*bounds, float("inf"))
    )
    out = (buckets, f"{name}_count{ls} ", f"{name}_sum{ls} ")
    if len(_PREFIX_CACHE) >= _PREFIX_CACHE_MAX:
        _PREFIX_CACHE.clear()
    _PREFIX_CACHE[key] = out
    return out


def _help(h: str) -> str:
    return h.replace("\\", "\\\\").replace("\n", "\\n")


class Writer:
    def __init__(self, *, created: bool = True, multiprocess: bool = False) -> None:
        self.out: list[str] = []
        self.created = created
        self.multiprocess = multiprocess

    def text(self) -> str:
        return "".join(self.out)

    def _head(self, name: str, help_: str, typ: str) -> None:
        self.out.append(f"# HELP {name} {_help(help_)}\n# TYPE {name} {typ}\n")

    def gauge(self, name: str, help_: str, samples: Iterable[tuple[Labels, float]]) -> None:
        self._head(name, help_, "gauge")
        out = self.out
        for labels, v in samples:
            out.append(f"{name}{label_str(labels)} {fnum(v)}\n")

    def counter(
        self,
        name: str,
        help_: str,
        samples: Iterable[tuple[Labels, float]],
        created_unix: float | None = None,
    ) -> None:
        """`name` without `_total`; the wire family name gets it."""
        total = f"{name}_total"
        samples = list(samples)
        self._head(total, help_, "counter")
        out = self.out
        for labels, v in samples:
            out.append(f"{total}{label_str(labels)} {fnum(v)}\n")
        if self.created and created_unix is not None:
            self._head(f"{name}_created", help_, "gauge")
            c = floatToGoString(created_unix)
            for labels, _ in samples:
                out.append(f"{name}_created{label_str(labels)} {c}\n")

    def histogram(
        self,
        name: str,
        help_: str,
        samples: Iterable[tuple[Labels, Histogram]],
        created_unix: float | None = None,
    ) -> None:
        samples = list(samples)
        self._head(name, help_, "histogram")
        out = self.out
        for labels, h in samples:
            heads, count_head, sum_head = _hist_prefixes(name, labels, h.bounds)
            if self.multiprocess:
                out.append(f"{sum_head}{floatToGoString(h.sum)}\n")
            acc = 0
            for head, c in zip(heads, h.counts, strict=True):
                acc += c
                out.append(f"{head}{fnum(acc)}\n")
            out.append(f"{count_head}{fnum(h.count)}\n")
            if not self.multiprocess:
                out.append(f"{sum_head}{floatToGoString(h.sum)}\n")
        if self.created and created_unix is not None and not self.multiprocess:
            self._head(f"{name}_created", help_, "gauge")
            c = floatToGoString(created_unix)
            for labels, _ in samples:
                out.append(f"{name}_created{label_str(labels)} {c}\n")
