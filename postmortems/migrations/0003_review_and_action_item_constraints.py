"""The constraints, in their own migration: 0002's data update commits first (PostgreSQL
refuses an ALTER TABLE with the update's trigger events still pending)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("postmortems", "0002_review_workflow_and_action_priority"),
    ]

    operations = [
        migrations.AddConstraint(
            model_name="actionitem",
            constraint=models.CheckConstraint(
                condition=models.Q(("type__in", ["mitigate", "prevent", "detect", "process"])),
                name="action_item_type_known",
            ),
        ),
        migrations.AddConstraint(
            model_name="actionitem",
            constraint=models.CheckConstraint(
                condition=models.Q(("priority__in", ["p0", "p1", "p2", "p3"])),
                name="action_item_priority_known",
            ),
        ),
        migrations.AddConstraint(
            model_name="actionitem",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("closed_at__isnull", True), ("status", "open")),
                    models.Q(("closed_at__isnull", False), ("status", "done")),
                    _connector="OR",
                ),
                name="action_item_done_when_closed",
            ),
        ),
        migrations.AddConstraint(
            model_name="postmortemversion",
            constraint=models.CheckConstraint(
                condition=models.Q(("review_state__in", ["draft", "in_review", "published"])),
                name="version_review_state_known",
            ),
        ),
        migrations.AddConstraint(
            model_name="postmortemversion",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("review_state", "draft"),
                    ("review_requested_at__isnull", False),
                    _connector="OR",
                ),
                name="version_review_requested_when_reviewed",
            ),
        ),
        migrations.AddConstraint(
            model_name="postmortemversion",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(
                        ("published_at__isnull", False),
                        ("review_state", "published"),
                        ("reviewer_name__gt", ""),
                    ),
                    models.Q(
                        models.Q(("review_state", "published"), _negated=True),
                        ("published_at__isnull", True),
                        ("reviewer_name", ""),
                    ),
                    _connector="OR",
                ),
                name="version_published_with_reviewer_and_date",
            ),
        ),
    ]
