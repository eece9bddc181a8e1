"""The Markdown export says what the page says, and typed text stays text."""

from __future__ import annotations

import pytest

from postmortems import markdown
from postmortems.markdown import render_markdown
from postmortems.record import load_document


def test_markdown_has_the_record(incident):
    md = render_markdown(load_document(incident))
    assert md.startswith("# Postmortem: p95 time to first token over target on atlas-prod")
    cause = md[md.index("## Root cause") : md.index("## Hypotheses")]
    assert "The KV cache is full; admission stalls and requests are preempted" in cause
    tree = md[md.index("## Hypotheses") : md.index("## Regression gate")]
    for key, reason in [
        ("router-latency", "Router p95 is 4 ms, far under 20 ms"),
        ("prefill-slow", "Prefill is on budget; the slow part is re-prefill"),
        ("kv-block-leak", "Running requests account for the KV usage"),
    ]:
        node = tree[tree.index(f"(`{key}`): eliminated") :]
        assert reason in node.split("\n#")[0]
        assert "| Check | Measured |" in node.split("\n#")[0]
    assert "| Router forward latency, p95 | 0.004 | 0.1 | 0.02 |" in tree
    fix = md[md.index("## Resolution") : md.index("## Root cause")]
    assert "`fewer-max-num-seqs`" in fix and "**passing**" in fix
    gate = md[md.index("## Regression gate") :]
    assert "```yaml\ngroups:\n- name: atlas-regression-gates" in gate
    assert "alert: AtlasKVCachePressure" in gate
    assert "- **SLO breach:** 16 min 30 s in 1 interval(s)" in md
    assert "- **Affected requests:** about 11," in md


@pytest.mark.parametrize(
    ("typed", "expected"),
    [
        ("<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"),
        ("[click](javascript:alert(1))", "\\[click\\](javascript:alert(1))"),
        ("![x](http://169.254.169.254/)", "\\!\\[x\\](http://169.254.169.254/)"),
        ("# not a heading", "\\# not a heading"),
        ("1. not a list", "1\\. not a list"),
        ("    not code", "not code"),
        ("a | b", "a \\| b"),
        ("*not* _emphasis_ `code`", "\\*not\\* \\_emphasis\\_ \\`code\\`"),
        ("AT&T", "AT&amp;T"),
    ],
)
def test_typed_text_is_escaped(typed, expected):
    assert markdown.escape(typed) == expected


def test_a_code_block_cannot_be_closed_from_inside():
    block = markdown.code_block("a\n```\n# injected", "yaml")
    assert block.startswith("````yaml\n") and block.endswith("\n````")


def test_an_undecided_criterion_says_why_and_an_unseen_one_says_no_data(incident):
    """A quantile whose bucket straddles its threshold is 'undecided', with the bucket;
    'no data' stays for a criterion nothing was measured for (and for facts frozen before
    the bucket rule, which carry no reason)."""
    doc = load_document(incident)
    rows = doc["verification"]["criteria"]
    assert rows
    straddling = {**rows[0], "holds": None, "held": "bucket 0.5 to 0.75 on both sides of 0.6"}
    unseen = {**rows[0], "holds": None}
    unseen.pop("held", None)
    doc["verification"]["criteria"] = [straddling, unseen]
    md = render_markdown(doc)
    assert "| undecided: bucket 0.5 to 0.75 on both sides of 0.6 |" in md
    assert "| no data |" in md
