from __future__ import annotations

from django import forms

from probes.models import HOST_KINDS, HTTP_KINDS, Target
from probes.net import ProbeError, validate_url


class TargetForm(forms.ModelForm):
    class Meta:
        model = Target
        fields = ["kind", "url", "path", "host_queue", "replica"]
        # A bare host:port is an engine on plain HTTP far more often than HTTPS.

    url = forms.URLField(
        max_length=500,
        required=False,
        assume_scheme="http",
        widget=forms.URLInput(attrs={"placeholder": "http://10.0.0.5:8000/metrics"}),
    )

    def clean(self) -> dict:
        data = super().clean()
        kind = data.get("kind")
        if kind in HTTP_KINDS:
            url = data.get("url", "")
            if not url:
                self.add_error("url", "This kind of target is read over HTTP: give its URL.")
            else:
                try:
                    validate_url(url)
                except ProbeError as exc:
                    self.add_error("url", exc.message)
        if kind in HOST_KINDS and not data.get("host_queue"):
            self.add_error(
                "host_queue", "Name the Celery queue of the worker running on that GPU host."
            )
        if kind == "log_file" and not str(data.get("path", "")).startswith("/"):
            self.add_error("path", "Give the log file's absolute path on the GPU host.")
        return data
