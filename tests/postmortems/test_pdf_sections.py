"""The PDF shows every section a postmortem has, in the order teams write them, read back
from the rendered file with pdftotext (what a reader of the file actually gets)."""

from __future__ import annotations

import subprocess
from datetime import timedelta

import pytest

from postmortems import actions
from postmortems.record import load_document
from tests.postmortems.conftest import need_poppler, need_weasyprint
from tests.postmortems.test_review import SECTIONS

HEADINGS = [
    "Summary",
    "Impact",
    "Trigger",
    "Detection",
    "Resolution",
    "Root cause",
    "Lessons learned",
    "What went well",
    "What went wrong",
    "Where we got lucky",
    "Action items",
    "Timeline (UTC)",
    "Supporting evidence",
    "Hypotheses",
]


@pytest.mark.slow
def test_the_pdf_shows_every_section(
    responder, commander, incident, frozen_now, tmp_path, time_machine
):
    need_poppler()
    pdf = need_weasyprint()
    actions.save_narrative(
        investigation=incident, sections=SECTIONS, base_version=0, user=responder
    )
    actions.add_action_item(
        investigation=incident,
        title="Alert on KV usage over 90 %",
        type="detect",
        priority="p1",
        owner=commander,
        due=frozen_now.date() - timedelta(days=2),
        user=responder,
    )
    actions.request_review(investigation=incident, user=responder, number=1)
    actions.publish(investigation=incident, user=commander, number=1)
    path = tmp_path / "postmortem.pdf"
    path.write_bytes(pdf.render_pdf(load_document(incident)))
    text = " ".join(
        subprocess.run(
            ["pdftotext", "-layout", str(path), "-"], check=True, capture_output=True, text=True
        ).stdout.split()
    )
    positions = [text.find(heading) for heading in HEADINGS]
    assert -1 not in positions, [h for h, p in zip(HEADINGS, positions, strict=True) if p < 0]
    assert positions == sorted(positions)  # in the order teams write them
    for written in SECTIONS.values():
        assert written in text, written
    # What the record fills in.
    assert "Duration from the alarm's samples: 19 min 00 s over the threshold" in text
    assert "SLO burn: 44.0 % of the error budget (99.9 % over 30 days" in text
    assert "a person opened it (30 s before the alarm first fired)" in text
    assert "Fix verified at" in text and "35 min 00 s after the investigation opened" in text
    # Action items with type, priority, owner, due date and status; the review recorded.
    assert "Alert on KV usage over 90 % detect P1 cora-commander" in text
    assert "overdue" in text
    assert "published at" in text and "reviewed by cora-commander" in text
