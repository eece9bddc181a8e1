"""The claims this IdP issues: username, e-mail and the user's Django groups as the
``groups`` claim (in the ID token and at userinfo), as Keycloak or Okta would send them."""

from oauth2_provider.oauth2_validators import OAuth2Validator


class GroupsValidator(OAuth2Validator):
    oidc_claim_scope = None  # every claim below, whatever the scopes

    def get_additional_claims(self, request):
        user = request.user
        return {
            "preferred_username": user.username,
            "email": user.email,
            "groups": sorted(user.groups.values_list("name", flat=True)),
        }
