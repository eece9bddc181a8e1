from django import forms

from teams.models import Role


class TeamForm(forms.Form):
    name = forms.CharField(max_length=100, strip=True)


class AddMemberForm(forms.Form):
    username = forms.CharField(max_length=150, strip=True)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.RESPONDER)


class ChangeRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)
