"""Settings of the test IdP. Its own cookie names: cookies ignore ports, so on 127.0.0.1 the
IdP's ``sessionid`` would overwrite Atlas's session in the same browser."""

import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

DB = Path(os.environ["IDP_DB"])
SECRET_KEY = "idp-test-only-" + "x" * 50
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.staticfiles",
    "oauth2_provider",
    "tests.sso.idp",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.sso.idp.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": DB}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
STATIC_URL = "/static/"
LOGIN_URL = "/accounts/login/"
SESSION_COOKIE_NAME = "idp_sessionid"
CSRF_COOKIE_NAME = "idp_csrftoken"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # test speed only

_key_file = DB.with_suffix(".key.pem")
if not _key_file.exists():
    _key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _key_file.write_bytes(
        _key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": _key_file.read_text(),
    "PKCE_REQUIRED": True,  # a client that sends no code_challenge is refused
    "SCOPES": {
        "openid": "OpenID Connect",
        "email": "E-mail address",
        "profile": "Profile",
        "groups": "Group membership",
    },
    "OAUTH2_VALIDATOR_CLASS": "tests.sso.idp.validator.GroupsValidator",
}
