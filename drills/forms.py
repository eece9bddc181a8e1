from django import forms

from drills import catalogue
from drills.actions import MAX_SEED


class StartDrillForm(forms.Form):
    scenario = forms.ChoiceField(choices=())
    seed = forms.IntegerField(
        required=False, min_value=0, max_value=MAX_SEED, help_text="Repeat a drill exactly."
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["scenario"].choices = [(catalogue.RANDOM, "Random incident")] + [
            (name, name) for name in catalogue.choices()
        ]
