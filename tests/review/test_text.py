"""What goes into a search document and how excerpts are shown: bounded, and nothing a
person typed can become markup."""

from __future__ import annotations

from review import text


def test_a_document_weights_title_cause_and_everything_written():
    doc = text.compose(
        title="ITL spikes on atlas-prod",
        root_cause="gc-pauses",
        symptom="itl-spikes",
        narratives=["The loop stalled.", ""],
        reasons=["gen-2 collections of 180 ms"],
        notes=["froze long-lived objects"],
        override="",
        comments=["Add a gc alert"],
    )
    assert doc.title == "ITL spikes on atlas-prod"
    # The key, what the cause is (investigations.causes) and the playbook's title for it.
    assert doc.cause.startswith("gc-pauses. Python garbage-collection pauses")
    assert "Python garbage collection pauses the engine loop" in doc.cause
    assert doc.body.split("\n") == [
        "The loop stalled.",
        "gen-2 collections of 180 ms",
        "froze long-lived objects",
        "Add a gc alert",
    ]


def test_unknown_symptoms_and_causes_still_index():
    doc = text.compose(title="t", root_cause="made-up", symptom="nope")
    assert doc.cause == "made-up"
    assert text.compose(title="t", root_cause="", symptom="nope").cause == ""


def test_hostile_text_is_cleaned_and_bounded():
    nasty = "a\x00b\x02forged\x03c\x1b[31m" + "x" * (3 * text.BODY_MAX_CHARS)
    doc = text.compose(
        title="T\x00" * 5000, root_cause="", symptom="itl-spikes", reasons=[nasty, nasty]
    )
    assert "\x00" not in doc.body and "\x02" not in doc.body and "\x03" not in doc.body
    assert doc.body.startswith("a b forged c [31m")
    assert len(doc.body) <= text.BODY_MAX_CHARS
    assert len(doc.title) <= text.TITLE_MAX_CHARS and "\x00" not in doc.title
    assert text.clean(None, 10) == "" and text.clean(42, 10) == ""


def test_headlines_escape_everything_but_their_own_marks():
    raw = f'<script>alert(1)</script> the {text.MARK_START}leak{text.MARK_STOP} & "more"'
    html = text.render_marked(raw)
    assert "<script>" not in html
    assert "&lt;script&gt;" in html
    assert "<mark>leak</mark>" in html and "&amp; &quot;more&quot;" in html
    # A fragment cut inside a match loses its marks instead of leaving one open.
    assert "<mark>" not in text.render_marked(f"{text.MARK_START}half")


def test_plain_excerpts_mark_every_term_case_insensitively():
    body = ("filler " * 40) + "KV blocks Leak after <b>aborts</b>; the leak grew" + (" tail" * 40)
    html = text.plain_excerpt(body, ["leak", "aborts"])
    assert html.startswith("… ") and html.endswith(" …")
    assert "<mark>Leak</mark>" in html and "<mark>leak</mark>" in html
    assert "&lt;b&gt;<mark>aborts</mark>&lt;/b&gt;" in html
    assert text.plain_excerpt(body, ["absent"]) == ""
    assert text.plain_excerpt("", ["leak"]) == ""
    # Terms are literal text, never patterns.
    assert text.plain_excerpt("a.*b (c", [".*", "("]) == "a<mark>.*</mark>b <mark>(</mark>c"
