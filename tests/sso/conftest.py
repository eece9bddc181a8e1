from tests.support.oidc_provider import idp, sso_on  # noqa: F401 - fixtures
