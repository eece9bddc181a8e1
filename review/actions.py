"""Changes made from the review pages."""

from __future__ import annotations

from investigations.models import Investigation
from review.models import COMMENT_MAX_CHARS, ReviewComment


def add_comment(*, investigation: Investigation, user, body: str) -> ReviewComment:
    """Add a comment (its search document is rebuilt when this commits)."""
    body = body.strip()
    if not body:
        raise ValueError("A comment needs some text.")
    if len(body) > COMMENT_MAX_CHARS:
        raise ValueError(f"A comment is limited to {COMMENT_MAX_CHARS:,} characters.")
    return ReviewComment.objects.create(investigation=investigation, author=user, body=body)
