from django import forms
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from teams.models import Role


class TeamForm(forms.Form):
    name = forms.CharField(max_length=100, strip=True)


class InviteForm(forms.Form):
    """Who to invite. Checked only for shape (an address, or something that could be a
    username): never against the accounts that exist, so no answer can tell them apart."""

    invitee = forms.CharField(max_length=254, strip=True, label="Username or e-mail address")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.RESPONDER)

    def clean_invitee(self) -> str:
        value = self.cleaned_data["invitee"]
        try:
            if "@" in value and "." in value.rsplit("@", 1)[-1]:
                validate_email(value)
            else:
                if len(value) > 150:
                    raise ValidationError("Usernames are at most 150 characters.")
                UnicodeUsernameValidator()(value)
        except ValidationError:
            raise ValidationError("Enter a username or an e-mail address.") from None
        return value


class ChangeRoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)
