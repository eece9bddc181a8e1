from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probes.parsing.exposition import (
    ExpositionError,
    ExpositionLimits,
    ExpositionMalformed,
    ExpositionTooLarge,
    parse_exposition,
    without_families,
)
from tests.probes.fixtures.scrapes import vllm_v1_scrape
from tests.probes.reference_parser import normalized, reference_families
from tests.support.samples import METRICS, REAL, samples_absent

SAMPLES = METRICS
SAMPLE_FILES = sorted(SAMPLES.glob("*.prom")) if SAMPLES.is_dir() else []
needs_samples = pytest.mark.skipif(samples_absent(METRICS), reason="shared samples not mounted")


def _both(data: bytes | str, limits: ExpositionLimits | None = None):
    kwargs = {} if limits is None else {"limits": limits}
    ours = parse_exposition(data, **kwargs)
    theirs = reference_families(data, **kwargs)
    return ours, theirs


def _assert_same(data: bytes | str) -> None:
    ours, theirs = _both(data)
    assert normalized(list(ours.families.values())) == normalized(theirs)


@needs_samples
@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name)
def test_every_real_sample_parses_like_prometheus_client(path):
    data = path.read_bytes()
    _assert_same(data)
    exp = parse_exposition(data)
    if "truncated" in path.name:
        (problem,) = exp.problems
        assert problem.family == "vllm:iteration_tokens_total"
        assert "+Inf" in problem.reason
        assert "vllm:iteration_tokens_total" not in exp.histograms
    else:
        assert exp.problems == ()


def test_realistic_v1_scrape_matches_reference_and_keeps_created_apart():
    text = vllm_v1_scrape(engines=2, legacy_names=True)
    _assert_same(text)
    exp = parse_exposition(text)
    tokens = exp.samples("vllm:prompt_tokens_total")
    assert len(tokens) == 2 and all(s.value < 1e8 for s in tokens)
    created = exp.samples("vllm:prompt_tokens_created")
    assert all(s.value > 1e9 for s in created)
    assert exp.family("vllm:iteration_tokens_total").type == "histogram"
    (h, _) = exp.histograms["vllm:iteration_tokens_total"]
    assert h.buckets[-1][0] == math.inf and h.count == h.buckets[-1][1]
    assert exp.problems == ()


def test_escapes_utf8_special_values_and_timestamps():
    text = (
        '# HELP m A \\\\ back\\nslash "help" ünïcode\n'
        "# TYPE m gauge\n"
        'm{a="q\\"uote",b="back\\\\slash",c="new\\nline",d="ü} {,=x"} 8.128902e+06 1700000000123\n'
        'm{a="nan"} NaN\nm{a="p"} +Inf\nm{a="n"} -Inf\n'
        '# just a comment\n\n  m{a="ws"}\t1.5  \n'
    )
    _assert_same(text)
    fam = parse_exposition(text).family("m")
    assert fam.help == 'A \\ back\nslash "help" ünïcode'
    first = fam.samples[0]
    assert dict(first.labels) == {
        "a": 'q"uote',
        "b": "back\\slash",
        "c": "new\nline",
        "d": "ü} {,=x",
    }
    assert first.value == 8128902.0 and first.timestamp == pytest.approx(1700000000.123)
    values = [s.value for s in fam.samples[1:4]]
    assert math.isnan(values[0]) and values[1:] == [math.inf, -math.inf]


def test_histogram_problems_are_reported_not_used():
    text = (
        "# TYPE h histogram\n"
        'h_bucket{x="ok",le="1"} 1\nh_bucket{x="ok",le="+Inf"} 2\nh_count{x="ok"} 2\n'
        'h_bucket{x="dec",le="1"} 5\nh_bucket{x="dec",le="+Inf"} 2\n'
        'h_bucket{x="cnt",le="+Inf"} 2\nh_count{x="cnt"} 3\n'
        'h_bucket{x="noinf",le="1"} 2\n'
        'h_bucket{x="badle",le="abc"} 2\nh_bucket{x="badle",le="+Inf"} 2\n'
    )
    exp = parse_exposition(text)
    assert [dict(h.labels) for h in exp.histograms["h"]] == [{"x": "ok"}]
    reasons = {dict(p.labels)["x"]: p.reason for p in exp.problems}
    assert set(reasons) == {"dec", "cnt", "noinf", "badle"}
    assert "decreases" in reasons["dec"] and "_count" in reasons["cnt"]


HOSTILE = {
    "garbage bytes": bytes(range(1, 32)) + b"\x7f garbage {{{ \n",
    "invalid utf-8": b'# TYPE a gauge\na 1\na{b="\xff\xfe"} 2\n',
    "10 MB single line": b"a" * (10 * 1024 * 1024),
    "long line": b'a{b="' + b"x" * 100_000 + b'"} 1\n',
    "huge label count": ("a{" + ",".join(f'l{i}="v"' for i in range(5000)) + "} 1\n").encode(),
    "duplicate label": b'a{b="1",b="2"} 1\n',
    "unterminated labels": b'a{b="1 1\n',
    "bad value": b"a 1.2.3\n",
    "underscore value": b"a 1_000\n",
    "bad type": b"# TYPE a flavour\na 1\n",
    "reserved label": b'a{__x="1"} 1\n',
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_inputs_rejected_clearly_by_both_parsers(name):
    data = HOSTILE[name]
    with pytest.raises(ExpositionError) as ours:
        parse_exposition(data)
    with pytest.raises(ExpositionError):
        reference_families(data)
    assert str(ours.value)
    if name == "invalid utf-8":
        assert isinstance(ours.value, ExpositionMalformed) and ours.value.line == 3
    if name in ("10 MB single line", "long line", "huge label count"):
        assert isinstance(ours.value, ExpositionTooLarge)


def test_series_bound():
    data = "".join(f'a{{i="{i}"}} 1\n' for i in range(50))
    limits = ExpositionLimits(max_series=10)
    with pytest.raises(ExpositionTooLarge):
        parse_exposition(data, limits)
    with pytest.raises(ExpositionTooLarge):
        reference_families(data, limits)


def test_malformed_reports_line_number():
    with pytest.raises(ExpositionMalformed) as err:
        parse_exposition("# TYPE a gauge\na 1\n\nthis is not a sample\n")
    assert err.value.line == 4


# --- differential property test -------------------------------------------------------

_name = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,12}", fullmatch=True)
_label = st.from_regex(r"[a-zA-Z][a-zA-Z0-9_]{0,8}", fullmatch=True)
_text = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp", "Zs")) | st.just(" "),
    max_size=20,
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _fmt(value: float, style: int) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return (repr(value), f"{value:e}", f"{value:g}")[style]


@st.composite
def expositions(draw) -> str:
    lines, used = [], set()
    for _ in range(draw(st.integers(0, 6))):
        name = draw(_name)
        if any(name == u or name.startswith(u) or u.startswith(name) for u in used):
            continue
        used.add(name)
        typ = draw(st.sampled_from(["gauge", "counter", "histogram", "summary", "untyped", None]))
        if typ is not None and draw(st.booleans()):
            help_text = draw(_text).strip().replace("\\", "\\\\")
            lines.append(f"# HELP {name} {help_text}".rstrip())
        if typ is not None:
            lines.append(f"# TYPE {name} {typ}")
        suffixes = {"histogram": ["_bucket", "_sum", "_count"], "summary": ["", "_sum", "_count"]}
        for _ in range(draw(st.integers(0 if typ else 1, 4))):
            suffix = draw(st.sampled_from(suffixes.get(typ or "", [""])))
            keys = draw(st.lists(_label, max_size=3, unique=True))
            labels = ",".join(f'{k}="{_escape(draw(_text))}"' for k in keys)
            value = _fmt(draw(st.floats()), draw(st.integers(0, 2)))
            ts = draw(st.none() | st.integers(0, 2**45))
            body = f"{name}{suffix}{{{labels}}}" if keys or draw(st.booleans()) else name + suffix
            lines.append(f"{body} {value}" + ("" if ts is None else f" {ts}"))
            if typ is None:
                break
        if draw(st.booleans()):
            lines.append("# a comment")
    return "\n".join(lines) + "\n"


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expositions())
def test_differential_against_prometheus_client(text):
    _assert_same(text)


# --- real excerpts users posted, whole and cut anywhere --------------------------------

REAL_SCRAPES = (
    sorted(
        p
        for folder in ("vllm_metrics", "sglang_metrics", "dcgm")
        for p in (REAL / folder).glob("*.prom")
    )
    if REAL.is_dir()
    else []
)
needs_real = pytest.mark.skipif(samples_absent(REAL), reason="shared samples not mounted")


def _outcome(parse, data: bytes):
    try:
        return normalized(list(parse(data)))
    except ExpositionError:
        return "rejected"


def _ours(data: bytes):
    return parse_exposition(data).families.values()


def _cuts(data: bytes) -> list[int]:
    """Every line boundary, the byte before it, and every 7th byte in between."""
    ends = {i + 1 for i, b in enumerate(data) if b == 0x0A}
    return sorted(
        ends | {e - 2 for e in ends if e >= 2} | set(range(0, len(data), 7)) | {len(data)}
    )


@needs_real
@pytest.mark.parametrize("path", REAL_SCRAPES, ids=lambda p: p.name)
def test_real_excerpts_parse_like_prometheus_client_whole_and_cut_anywhere(path):
    """What agreement means on excerpts (cut mid-histogram, HELP/TYPE without samples, cut
    mid-line): for every prefix of the file, both parsers accept it with the same families,
    help, samples and values, or both reject it. One documented difference: a last line cut
    to a bare ``# TYPE`` (no name) makes prometheus_client raise, while ours treats it as the
    comment it is, as the Prometheus server's own parser does; ours then equals the
    reference on the text without that partial line."""
    data = path.read_bytes()
    whole = _outcome(_ours, data)
    assert whole != "rejected" and whole == _outcome(reference_families, data)
    for cut in _cuts(data):
        part = data[:cut]
        ours, theirs = _outcome(_ours, part), _outcome(reference_families, part)
        if ours == theirs:
            continue
        last = part.rsplit(b"\n", 1)[-1]
        assert theirs == "rejected" and last.strip() in (b"# TYPE", b"# HELP"), (cut, last)
        assert ours == _outcome(reference_families, part[: len(part) - len(last)])


BLANKING = """# HELP keep_me A gauge read.
# TYPE keep_me gauge
keep_me 1.0
# HELP drop_total A counter nobody reads.
# TYPE drop_total counter
drop_total{a="1"} 3.0
drop_created{a="1"} 1.7e9
# HELP drop_hist Histogram nobody reads.
# TYPE drop_hist histogram
drop_hist_bucket{le="1.0"} 1.0
drop_hist_bucket{le="+Inf"} 2.0
drop_hist_count 2.0
drop_hist_sum 3.5
# HELP also_kept Read.
# TYPE also_kept gauge
also_kept 2.0
"""


def test_blanked_families_are_gone_and_every_other_line_keeps_its_number():
    blanked = without_families(BLANKING, {"drop", "drop_hist"}, lambda n: n.removesuffix("_total"))
    assert blanked.count("\n") == BLANKING.count("\n")
    families = parse_exposition(blanked).families
    assert set(families) == {"keep_me", "also_kept"}
    assert families["also_kept"].samples[0].value == 2.0
    # An error after a blanked block is reported at the line it has in the scrape.
    broken = BLANKING.replace("also_kept 2.0", "also_kept two")
    with pytest.raises(ExpositionMalformed) as whole:
        parse_exposition(broken)
    with pytest.raises(ExpositionMalformed) as lean:
        parse_exposition(without_families(broken, {"drop_total", "drop_hist"}))
    assert lean.value.line == whole.value.line == BLANKING.count("\n")


@pytest.mark.parametrize(
    "intruder",
    [
        "stray_untyped 1.0",  # a family declared without HELP, inside the block
        "# TYPE other gauge\nother 1.0",  # another family's TYPE without HELP
        "  drop_hist_count 2.0",  # an indented line: not the plain shape, parsed as is
        "drop_histogram_x 1.0",  # a longer name that merely starts like the family
    ],
)
def test_a_block_with_a_line_not_its_own_is_kept(intruder):
    text = BLANKING.replace("drop_hist_sum 3.5", f"drop_hist_sum 3.5\n{intruder}")
    blanked = without_families(text, {"drop_hist"})
    assert "drop_hist_bucket" in blanked and intruder in blanked


@pytest.mark.parametrize(
    "text",
    [
        "",
        "# HELP",
        "# HELP drop_hist\n",  # at the very start: no newline before it
        "\n# HELP \n# HELP  drop_hist x\n",
        "\n# HELP drop_hist!! x\ndrop_hist_count 1\n",  # not a name: left to the parser
        "\n# HELP drop_hist" + " x" * 50_000,
        "\n# HELP drop_hist x\r\ndrop_hist_count 1\r\n",
    ],
)
def test_hostile_text_is_left_to_the_parser(text):
    blanked = without_families(text, {"drop_hist"})
    assert blanked.count("\n") == text.count("\n")
    if "drop_hist!!" in text:
        assert blanked == text
    if text.startswith("# HELP drop_hist"):
        assert blanked == "\n"
