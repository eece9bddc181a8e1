"""A real OpenID Connect provider for the SSO tests: a second, tiny Django project on
django-oauth-toolkit's OIDC server, started by ``tests/sso/conftest.py`` as a subprocess
on a free 127.0.0.1 port (``python -m tests.sso.idp.serve``). Not part of the product."""
