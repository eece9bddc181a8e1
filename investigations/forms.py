from django import forms

from investigations.choices import DecisionAction, NodeState
from investigations.playbook import playbooks


class OpenInvestigationForm(forms.Form):
    symptom = forms.ChoiceField(choices=())
    title = forms.CharField(max_length=200, required=False, strip=True)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["symptom"].choices = [(k, p.title) for k, p in sorted(playbooks().items())]


class DecisionForm(forms.Form):
    node = forms.CharField(max_length=64)
    action = forms.ChoiceField(choices=DecisionAction.choices())
    reason = forms.CharField(max_length=4000, strip=True)
    expected_state = forms.ChoiceField(choices=[(s.value, s.value) for s in NodeState])
