from django import forms
from django.contrib.auth import get_user_model

from postmortems.models import SECTION_MAX_CHARS, SECTIONS, ActionItem, Export


class NarrativeForm(forms.Form):
    base_version = forms.IntegerField(min_value=0, widget=forms.HiddenInput)
    comment = forms.CharField(max_length=500, required=False, strip=True)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for key, title in SECTIONS.items():
            self.fields[key] = forms.CharField(
                label=title,
                required=False,
                strip=False,
                max_length=SECTION_MAX_CHARS,
                widget=forms.Textarea(attrs={"rows": 3}),
            )

    def sections(self) -> dict[str, str]:
        return {key: self.cleaned_data.get(key, "") for key in SECTIONS}


class ActionItemForm(forms.Form):
    title = forms.CharField(max_length=300, strip=True)
    type = forms.ChoiceField(choices=ActionItem.Type.choices)
    priority = forms.ChoiceField(
        choices=ActionItem.Priority.choices, initial=ActionItem.Priority.P2, required=False
    )
    owner = forms.ModelChoiceField(queryset=None, required=False, to_field_name="username")
    owner_text = forms.CharField(max_length=200, required=False, strip=True, label="or owner")
    due = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))

    def clean_priority(self) -> str:
        return self.cleaned_data.get("priority") or ActionItem.Priority.P2

    def __init__(self, *args, team_id, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Owners are members of the investigation's team, nobody else.
        self.fields["owner"].queryset = (
            get_user_model().objects.filter(memberships__team_id=team_id).order_by("username")
        )


class ExportForm(forms.Form):
    format = forms.ChoiceField(choices=Export.Format.choices)


class ReviewForm(forms.Form):
    """A review step names the version the person read (stale steps are refused)."""

    version = forms.IntegerField(min_value=1, widget=forms.HiddenInput)
