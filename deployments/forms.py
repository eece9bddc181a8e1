"""The deployment form: identity, polling and the budget constants in one place.

The budget is validated the way evaluation will use it (``Budget`` refuses impossible
constants), so a saved deployment can always be evaluated.
"""

from __future__ import annotations

from django import forms
from django.core.validators import MinValueValidator

from deployments.budget import Budget
from deployments.models import Deployment
from teams.models import Team

BUDGET_FIELDS = tuple(Budget.__dataclass_fields__)
IDENTITY_FIELDS = ("name", "engine", "model_name", "poll_interval_s")


class DeploymentForm(forms.ModelForm):
    """Edit a deployment of a known team (the team never changes here)."""

    class Meta:
        model = Deployment
        fields = [*IDENTITY_FIELDS, *BUDGET_FIELDS]
        labels = {
            "poll_interval_s": "Poll interval (s)",
            "weights_gb": "Model weights (GB, all ranks)",
            "tp_size": "Tensor-parallel degree",
            "kv_budget_gib_per_rank": "KV budget per rank (GiB)",
            "gpu_memory_gib_per_rank": "GPU memory per rank (GiB)",
            "kv_bytes_per_token": "KV bytes per token (per rank)",
            "prefill_ms_per_token": "Prefill cost (ms per token)",
            "decode_step_ms": "Decode step (ms)",
            "max_num_batched_tokens": "Chunk budget (max-num-batched-tokens)",
            "max_num_seqs": "max-num-seqs",
            "ttft_target_ms": "TTFT target (ms)",
            "itl_ceiling_ms": "ITL ceiling (ms)",
            "queue_baseline_low": "Queue baseline, low",
            "queue_baseline_high": "Queue baseline, high",
            "sm_clock_mhz": "Full SM clock (MHz)",
        }

    def __init__(self, *args, team: Team | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.team = team if team is not None else getattr(self.instance, "team", None)
        for name in BUDGET_FIELDS:
            field = self.fields[name]
            if isinstance(field, forms.FloatField):
                field.widget.attrs["min"] = 0
                field.validators.append(MinValueValidator(0.0))

    def clean_name(self) -> str:
        name = self.cleaned_data["name"].strip()
        if self.team is not None:
            taken = Deployment.objects.filter(team=self.team, name=name)
            if self.instance.pk:
                taken = taken.exclude(pk=self.instance.pk)
            if taken.exists():
                raise forms.ValidationError(f"{self.team} already has a deployment named {name}.")
        return name

    def clean(self) -> dict:
        data = super().clean()
        if all(name in data for name in BUDGET_FIELDS):
            try:
                Budget(**{name: data[name] for name in BUDGET_FIELDS})
            except ValueError as exc:
                raise forms.ValidationError(str(exc)) from None
            if data["queue_baseline_low"] > data["queue_baseline_high"]:
                self.add_error("queue_baseline_high", "The high baseline is below the low one.")
        return data


class NewDeploymentForm(DeploymentForm):
    """Create a deployment in one of the teams the user commands."""

    team_choice = forms.ModelChoiceField(queryset=Team.objects.none(), label="Team")

    field_order = ["team_choice", *IDENTITY_FIELDS, *BUDGET_FIELDS]

    def __init__(self, *args, teams=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if teams is not None:
            self.fields["team_choice"].queryset = teams
            only = list(teams[:2])
            if len(only) == 1:
                self.fields["team_choice"].initial = only[0].pk

    def clean_team_choice(self) -> Team:
        self.team = self.cleaned_data["team_choice"]
        return self.team

    def _post_clean(self) -> None:
        if self.team is not None:
            self.instance.team = self.team
        super()._post_clean()
