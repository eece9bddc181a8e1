"""The forms of the discovery pages: engine URLs to read, a Prometheus and its selector."""

from __future__ import annotations

from django import forms

from probes import discovery, engine_discovery
from probes.net import ProbeError
from probes.promapi import api_url


class EngineUrlsForm(forms.Form):
    urls = forms.CharField(
        label="Engine URLs (one per replica)",
        max_length=engine_discovery.MAX_ENGINES * 600,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "http://10.0.0.5:8000"}),
        help_text="The engine's base URL or its /metrics URL; Atlas reads /metrics, "
        "/v1/models and (SGLang) /server_info once.",
    )

    def clean_urls(self) -> list[str]:
        try:
            return engine_discovery.parse_urls(self.cleaned_data["urls"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


class PrometheusForm(forms.Form):
    prometheus_url = forms.CharField(
        label="Prometheus URL",
        max_length=500,
        widget=forms.URLInput(attrs={"placeholder": "http://10.0.0.9:9090"}),
    )
    selector = forms.CharField(
        label="Label selector",
        required=False,
        max_length=discovery.MAX_SELECTOR_CHARS,
        widget=forms.TextInput(attrs={"placeholder": 'namespace="llm-prod", job=~"vllm.*"'}),
        help_text="Label matchers every series must carry; empty lists all of them.",
    )

    def clean_prometheus_url(self) -> str:
        url = self.cleaned_data["prometheus_url"].strip().rstrip("/")
        try:
            api_url(url, "series")
        except ProbeError as exc:
            raise forms.ValidationError(exc.message) from None
        return url

    def clean_selector(self) -> str:
        try:
            return discovery.selector_text(discovery.parse_selector(self.cleaned_data["selector"]))
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
