"""The review list's GET filters and the comment form. Invalid filter values are reported
and ignored; the rest of the filters still apply."""

from __future__ import annotations

from django import forms

from investigations.causes import CAUSE_KEYS
from investigations.models import Investigation
from investigations.playbook import playbooks
from review.models import COMMENT_MAX_CHARS
from review.search import NO_ROOT_CAUSE, QUERY_MAX_CHARS, Filters

ANY = ("", "Any")


class ReviewFilterForm(forms.Form):
    q = forms.CharField(
        required=False,
        max_length=QUERY_MAX_CHARS,
        label="Search",
        widget=forms.TextInput(attrs={"type": "search", "placeholder": 'e.g. "kv cache" leak'}),
    )
    symptom = forms.ChoiceField(required=False)
    deployment = forms.ChoiceField(required=False)
    root_cause = forms.ChoiceField(required=False, label="Root cause")
    status = forms.ChoiceField(required=False, choices=[ANY, *Investigation.Status.choices])
    kind = forms.ChoiceField(
        required=False, label="Drill or real", choices=[ANY, ("real", "Real"), ("drill", "Drill")]
    )
    opened_from = forms.DateField(
        required=False, label="Opened from", widget=forms.DateInput(attrs={"type": "date"})
    )
    opened_to = forms.DateField(
        required=False, label="Opened to", widget=forms.DateInput(attrs={"type": "date"})
    )

    def __init__(self, *args, deployments=(), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["symptom"].choices = [
            ANY,
            *((key, f"{key}: {pb.title}") for key, pb in sorted(playbooks().items())),
        ]
        self.fields["deployment"].choices = [
            ANY,
            *((str(d.pk), f"{d.name} ({d.team.name})") for d in deployments),
        ]
        self.fields["root_cause"].choices = [
            ANY,
            *((key, key) for key in sorted(CAUSE_KEYS)),
            (NO_ROOT_CAUSE, "None recorded"),
        ]

    def clean(self):
        data = super().clean()
        start, end = data.get("opened_from"), data.get("opened_to")
        if start and end and start > end:
            self.add_error("opened_to", "The range ends before it starts.")
        return data

    def filters(self) -> Filters:
        """The valid part of the input (call after is_valid())."""
        data = getattr(self, "cleaned_data", {})
        return Filters(
            symptom=data.get("symptom") or "",
            deployment=data.get("deployment") or "",
            root_cause=data.get("root_cause") or "",
            status=data.get("status") or "",
            kind=data.get("kind") or "",
            opened_from=data.get("opened_from"),
            opened_to=data.get("opened_to"),
        )

    def query(self) -> str:
        return getattr(self, "cleaned_data", {}).get("q") or ""


class CommentForm(forms.Form):
    body = forms.CharField(
        label="Comment",
        max_length=COMMENT_MAX_CHARS,
        strip=True,
        widget=forms.Textarea(attrs={"rows": 4, "maxlength": COMMENT_MAX_CHARS}),
    )
