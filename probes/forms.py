from __future__ import annotations

import re

from django import forms

from probes.kinds import Needs, kind_of
from probes.models import Target
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

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Only kinds people add: a stored kind's target is the console's own (one per
        # deployment, written by the artifacts app), and a posted one is refused.
        kind = self.fields["kind"]
        kind.choices = [(v, label) for v, label in kind.choices if not v or kind_of(v).probed]

    def clean(self) -> dict:
        """Each field the kind's registry entry ``needs`` must be given; queries are kept
        only for a kind that evaluates them."""
        data = super().clean()
        value = data.get("kind")
        needs = kind_of(value).needs if value else frozenset()
        if Needs.URL in needs:
            url = data.get("url", "")
            if not url:
                self.add_error("url", "This kind of target is read over HTTP: give its URL.")
            else:
                try:
                    check_registered_url(url, fetch_policy())
                except ProbeError as exc:
                    self.add_error("url", exc.message)
        if Needs.HOST_QUEUE in needs and not data.get("host_queue"):
            self.add_error(
                "host_queue", "Name the Celery queue of the worker running on that GPU host."
            )
        if Needs.PATH in needs and not str(data.get("path", "")).startswith("/"):
            self.add_error("path", "Give the log file's absolute path on the GPU host.")
        try:
            queries = parse_queries(data.get("queries_text") or "")
        except forms.ValidationError as exc:
            self.add_error("queries_text", exc)
        else:
            if Needs.QUERIES in needs and not queries:
                self.add_error(
                    "queries_text", "This kind of target evaluates PromQL: give at least one query."
                )
            self.instance.queries = queries if Needs.QUERIES in needs else {}
        return data
