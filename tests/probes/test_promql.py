"""PromQL templating (``probes.promql``): placeholders rendered safely for their position.

Pure text; the real-Prometheus injection check stays in ``test_promapi``.
"""

from __future__ import annotations

import math

import pytest

from probes.promql import render_promql
from tests.probes.test_promapi import ROUTER_P95


def test_router_p95_template_renders():
    assert render_promql(ROUTER_P95, job="router", window="5m") == (
        "histogram_quantile(0.95, sum by (le) "
        '(rate(router_forward_duration_seconds_bucket{job="router"}[5m])))'
    )


def test_label_values_cannot_break_out_of_their_string_literal():
    attack = '"} or vector(1) #'
    rendered = render_promql('up{job="${job}"}', job=attack)
    assert rendered == 'up{job="\\"} or vector(1) #"}'
    rendered = render_promql("up{job='${job}'}", job="a'b\\c\nd\x01")
    assert rendered == "up{job='a\\'b\\\\c\\nd\\x01'}"
    assert render_promql('up{job="${job}"}', job="it's") == 'up{job="it\'s"}'


def test_outside_string_literals_only_numbers_and_durations_are_allowed():
    template = "histogram_quantile(${q}, rate(x[${window}])) > ${limit}"
    assert render_promql(template, q=0.95, window="30s", limit=2) == (
        "histogram_quantile(0.95, rate(x[30s])) > 2"
    )
    for bad in ("5m] or vector(1", "5 m", "1h30m", "-5m", "5M", ""):
        with pytest.raises(ValueError, match="duration"):
            render_promql("rate(x[${window}])", window=bad)
    for bad in (math.inf, math.nan, True):
        with pytest.raises(ValueError):
            render_promql("x > ${limit}", limit=bad)


def test_missing_unknown_and_malformed_placeholders_raise():
    with pytest.raises(ValueError, match="no value"):
        render_promql('up{job="${job}"}')
    with pytest.raises(ValueError, match="without a placeholder: extra"):
        render_promql('up{job="${job}"}', job="a", extra="b")
    with pytest.raises(ValueError, match="placeholder"):
        render_promql("up > ${1bad}")
    with pytest.raises(ValueError, match="unterminated"):
        render_promql('up{job="${job}}', job="a")
    with pytest.raises(ValueError, match="comments"):
        render_promql("up # ${job}", job="a")
    with pytest.raises(ValueError, match="backtick"):
        render_promql("up{job=`${job}`}", job="a`b")


def test_promql_braces_and_escaped_quotes_in_templates_are_left_alone():
    template = 'up{job="a\\"${x}"} # a "comment" with {braces}\n+ on() ${n}'
    assert render_promql(template, x="b", n=1) == (
        'up{job="a\\"b"} # a "comment" with {braces}\n+ on() 1'
    )
