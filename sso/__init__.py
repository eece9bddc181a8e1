"""Single sign-on: OpenID Connect login and the IdP-groups-to-team-roles mapping (issue 18).

Off unless ``ATLAS_OIDC_CLIENT_ID`` is set; then the login page offers "Sign in with SSO"
beside the local form, which stays for break-glass accounts.
"""
