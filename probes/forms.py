from __future__ import annotations

import re

from django import forms

from probes.models import HOST_KINDS, HTTP_KINDS, ON_DEMAND_KINDS, Target, TargetKind
from probes.net import ProbeError, check_registered_url
from probes.policy import fetch_policy

QUERY_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
MAX_QUERIES = 20
MAX_PROMQL = 4096


def parse_queries(text: str) -> dict[str, str]:
    """``name = PromQL`` per line (blank lines and ``#`` comments ignored)."""
    queries: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, promql = line.partition("=")
        name, promql = name.strip(), promql.strip()
        if not sep or not QUERY_NAME.match(name) or not promql:
            raise forms.ValidationError(
                f"Line {number}: write `signal_name = PromQL` (lower-case name, letters, "
                "digits and underscores)."
            )
        if len(promql) > MAX_PROMQL:
            raise forms.ValidationError(f"Line {number}: PromQL longer than {MAX_PROMQL} chars.")
        if name in queries:
            raise forms.ValidationError(f"Line {number}: {name} is defined twice.")
        queries[name] = promql
    if len(queries) > MAX_QUERIES:
        raise forms.ValidationError(f"At most {MAX_QUERIES} queries per Prometheus target.")
    return queries


class TargetForm(forms.ModelForm):
    class Meta:
        model = Target
        fields = ["kind", "url", "path", "host_queue", "replica"]
        # A bare host:port is an engine on plain HTTP far more often than HTTPS.

    queries_text = forms.CharField(
        label="PromQL queries",
        required=False,
        max_length=MAX_QUERIES * (MAX_PROMQL + 64),
        widget=forms.Textarea(attrs={"rows": 4, "placeholder": "router_forward_p95 = ..."}),
    )
    url = forms.URLField(
        max_length=500,
        required=False,
        assume_scheme="http",
        widget=forms.URLInput(attrs={"placeholder": "http://10.0.0.5:8000/metrics"}),
    )

    def clean(self) -> dict:
        data = super().clean()
        kind = data.get("kind")
        if kind in HTTP_KINDS + ON_DEMAND_KINDS:
            url = data.get("url", "")
            if not url:
                self.add_error("url", "This kind of target is read over HTTP: give its URL.")
            else:
                try:
                    check_registered_url(url, fetch_policy())
                except ProbeError as exc:
                    self.add_error("url", exc.message)
        if kind in HOST_KINDS and not data.get("host_queue"):
            self.add_error(
                "host_queue", "Name the Celery queue of the worker running on that GPU host."
            )
        if kind == "log_file" and not str(data.get("path", "")).startswith("/"):
            self.add_error("path", "Give the log file's absolute path on the GPU host.")
        try:
            queries = parse_queries(data.get("queries_text") or "")
        except forms.ValidationError as exc:
            self.add_error("queries_text", exc)
        else:
            if kind == TargetKind.PROMETHEUS and not queries:
                self.add_error("queries_text", "A Prometheus target needs at least one query.")
            self.instance.queries = queries if kind == TargetKind.PROMETHEUS else {}
        return data
