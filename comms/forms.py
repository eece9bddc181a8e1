from __future__ import annotations

from django import forms

from comms.delivery import policy
from comms.models import ChatWebhook
from probes.net import ProbeError, check_registered_url


class StatusUpdateForm(forms.Form):
    text = forms.CharField(max_length=2000, widget=forms.Textarea(attrs={"rows": 2}))


class WebhookForm(forms.ModelForm):
    url = forms.URLField(max_length=2000, assume_scheme="https", label="Incoming webhook URL")

    class Meta:
        model = ChatWebhook
        fields = ["name", "kind", "url"]

    def clean_url(self) -> str:
        """Refused now what every send would refuse (metadata names, blocked or disallowed
        address literals): an error on the form, not a delivery that always fails."""
        url = self.cleaned_data["url"]
        try:
            check_registered_url(url, policy())
        except ProbeError as exc:
            raise forms.ValidationError(exc.message) from None
        return url
