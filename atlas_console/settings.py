"""Atlas Console settings, read from the environment (see README "Configuration").

Nothing here has side effects beyond creating the project-local data folder
for the embedded default. Unset variables give a working single-machine demo;
``ATLAS_ENV=production`` demands the values a real deployment needs.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from atlas_console import env
from sso import config as sso_config

BASE_DIR = Path(__file__).resolve().parent.parent
ENVIRON = os.environ

ATLAS_ENV = env.env_choice(ENVIRON, "ATLAS_ENV", env.ENVIRONMENTS, "development")
PRODUCTION = ATLAS_ENV == "production"
DEBUG = env.env_bool(ENVIRON, "ATLAS_DEBUG", default=False)
if PRODUCTION and DEBUG:
    raise ImproperlyConfigured("ATLAS_DEBUG must be off when ATLAS_ENV=production.")

DATA_DIR = Path(env.env_str(ENVIRON, "ATLAS_DATA_DIR") or BASE_DIR / "var").resolve()
DATA_DIR.mkdir(parents=True, exist_ok=True)

SECRET_KEY = env.env_str(ENVIRON, "ATLAS_SECRET_KEY")
if not SECRET_KEY:
    if PRODUCTION:
        raise ImproperlyConfigured("ATLAS_SECRET_KEY is required when ATLAS_ENV=production.")
    # Development only: a key that is stable per checkout but never shared.
    _key_file = DATA_DIR / "secret_key"
    if not _key_file.exists():
        from django.core.management.utils import get_random_secret_key

        _key_file.write_text(get_random_secret_key())
        _key_file.chmod(0o600)
    SECRET_KEY = _key_file.read_text().strip()
elif len(SECRET_KEY) < 50:
    raise ImproperlyConfigured("ATLAS_SECRET_KEY must be at least 50 characters long.")

ALLOWED_HOSTS = env.env_list(
    ENVIRON, "ATLAS_ALLOWED_HOSTS", default=() if PRODUCTION else ("127.0.0.1", "localhost")
)
if PRODUCTION and not ALLOWED_HOSTS:
    raise ImproperlyConfigured("ATLAS_ALLOWED_HOSTS is required when ATLAS_ENV=production.")
CSRF_TRUSTED_ORIGINS = env.env_list(ENVIRON, "ATLAS_CSRF_TRUSTED_ORIGINS")
for _origin in CSRF_TRUSTED_ORIGINS:
    if not _origin.startswith(("https://", "http://")):
        raise ImproperlyConfigured(
            f"ATLAS_CSRF_TRUSTED_ORIGINS item {_origin!r} must start with https:// or http://."
        )

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "atlas_console",
    "teams",
    "deployments",
    "probes",
    "investigations",
    "artifacts",
    "postmortems",
    "review",
    "drills",
    "comms",
    "sso",
    "audit",
    "axes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "atlas_console.security.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    # Before CSRF: the token check reads request.POST too, and every view after it must
    # see the same cleaned text (issue 19.5).
    "atlas_console.security.SafeTextMiddleware",
    "atlas_console.errors.ApiErrorsAsJson",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes requires: turns a locked-out login into its 429 page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "atlas_console.urls"
WSGI_APPLICATION = "atlas_console.wsgi.application"
ASGI_APPLICATION = "atlas_console.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "atlas_console.context_processors.atlas",
                "sso.context_processors.sso",
            ],
        },
    },
]

DATABASES = {
    "default": env.database_config(
        env.env_str(ENVIRON, "DATABASE_URL"),
        DATA_DIR,
        # 0 in the gevent web server (deploy/gunicorn.conf.py): a connection per greenlet.
        conn_max_age=env.env_int(ENVIRON, "ATLAS_DB_CONN_MAX_AGE", 60, minimum=0, maximum=3600),
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"

# Login throttling (issue 19.7: 40 wrong passwords then a success went through, on the
# console's login and /admin/login/ alike, at ~1.5 s of hashing CPU each). django-axes
# counts failures per username and client address together, in the database (so every
# web process shares the count), and after AXES_FAILURE_LIMIT of them refuses that pair
# for AXES_COOLOFF_TIME with 429, before any password is hashed (its backend comes first).
# Per pair, not per username alone, so a stranger cannot lock a commander out from
# elsewhere; a success resets the pair's count. Each lockout is an audit entry
# ("login.lockout", audit.lockouts) and axes' own WARNING log line. The client address
# is REMOTE_ADDR: behind a proxy, set AXES_IPWARE_PROXY_COUNT (with django-ipware) or every
# client shares the proxy's address.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env.env_int(ENVIRON, "ATLAS_LOGIN_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(
    minutes=env.env_int(ENVIRON, "ATLAS_LOGIN_COOLOFF_MINUTES", 15, minimum=1)
)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
LOGIN_REDIRECT_URL = "home"
# Team invitations (issue 19.12) lapse after this many days: an offer nobody answered
# must not stay usable forever by whoever later gets that username or address.
ATLAS_INVITATION_DAYS = env.env_int(ENVIRON, "ATLAS_INVITATION_DAYS", 7, minimum=1)
LOGOUT_REDIRECT_URL = "login"

# Single sign-on (sso/, README "Single sign-on"): OpenID Connect through
# mozilla-django-oidc, off unless ATLAS_OIDC_CLIENT_ID is set; then its backend is added
# after axes' and the local one, so the local login form (break-glass accounts) and its
# lockout stay as they are. The IdP's endpoints are trusted operator configuration: the
# server calls them directly, not through the probes' network guard.
try:
    _sso = sso_config.django_settings(ENVIRON, production=PRODUCTION)
except sso_config.ConfigError as _error:
    raise ImproperlyConfigured(str(_error)) from _error
for _name, _value in _sso.items():
    globals()[_name] = _value
if _sso["ATLAS_OIDC_ENABLED"]:
    AUTHENTICATION_BACKENDS.append(sso_config.BACKEND)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = DATA_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)  # WhiteNoise warns about a missing root
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
]
# Hashed, pre-compressed static files (brotli and gzip, cached for a year) need a
# `collectstatic` first: production always; `./atlas demo` runs it and turns this on, so
# plotly.js (static/vendor/plotly, 1.5 MB) crosses the wire once, compressed. Tests serve
# from the finders.
STATIC_MANIFEST = env.env_bool(ENVIRON, "ATLAS_STATIC_MANIFEST", default=PRODUCTION)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if STATIC_MANIFEST
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
WHITENOISE_USE_FINDERS = not STATIC_MANIFEST
# Only the hashed copies are kept (and compressed): half the collectstatic time, and a
# template that hard-codes /static/... fails loudly instead of serving a stale file.
WHITENOISE_KEEP_ONLY_HASHED_FILES = STATIC_MANIFEST
MEDIA_ROOT = DATA_DIR / "media"

# --- Security -----------------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
# Content-Security-Policy (atlas_console/security.py). Scripts only from this origin, no
# inline scripts and no eval; htmx's indicator <style> is switched off in base.html, so
# styles need no 'unsafe-inline' either. plotly.js appends two <style> elements of its
# own (one empty, filled through the CSSOM; one fixed block of map CSS): the middleware
# adds the hashes of exactly those two, read from the served plotly.js, to style-src.
# Its colour bars also set an empty style="" attribute: 'unsafe-hashes' lets the empty
# string's hash admit that attribute too (and no non-empty one).
ATLAS_CSP = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    "font-src": ["'self'"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'none'"],
    "frame-ancestors": ["'none'"],
    "form-action": ["'self'"],
}
if PRODUCTION:
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_SSL_REDIRECT = env.env_bool(ENVIRON, "ATLAS_SSL_REDIRECT", default=True)
    SECURE_HSTS_SECONDS = env.env_int(
        ENVIRON, "ATLAS_HSTS_SECONDS", 31_536_000, minimum=0, maximum=63_072_000
    )
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = env.env_bool(ENVIRON, "ATLAS_HSTS_PRELOAD", default=True)
    if env.env_bool(ENVIRON, "ATLAS_BEHIND_TLS_PROXY", default=False):
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# --- Celery -------------------------------------------------------------------------------
CELERY_TASK_SOFT_TIME_LIMIT = env.env_int(
    ENVIRON, "ATLAS_TASK_SOFT_TIME_LIMIT", 60, minimum=1, maximum=3600
)
CELERY_TASK_TIME_LIMIT = env.env_int(ENVIRON, "ATLAS_TASK_TIME_LIMIT", 90, minimum=2, maximum=7200)
if CELERY_TASK_TIME_LIMIT <= CELERY_TASK_SOFT_TIME_LIMIT:
    raise ImproperlyConfigured(
        "ATLAS_TASK_TIME_LIMIT must be greater than ATLAS_TASK_SOFT_TIME_LIMIT "
        f"({CELERY_TASK_TIME_LIMIT} <= {CELERY_TASK_SOFT_TIME_LIMIT})."
    )
_visibility = env.env_int(ENVIRON, "ATLAS_BROKER_VISIBILITY_TIMEOUT", 3600, minimum=1)
if _visibility <= CELERY_TASK_TIME_LIMIT:
    raise ImproperlyConfigured(
        "ATLAS_BROKER_VISIBILITY_TIMEOUT must exceed ATLAS_TASK_TIME_LIMIT, or a task still "
        f"running would be delivered a second time ({_visibility} <= {CELERY_TASK_TIME_LIMIT})."
    )
_broker = env.broker_config(
    env.env_str(ENVIRON, "CELERY_BROKER_URL"), DATA_DIR, visibility_timeout=_visibility
)
CELERY_BROKER_URL = _broker.url
CELERY_BROKER_TRANSPORT_OPTIONS = _broker.transport_options
ATLAS_EMBEDDED_BROKER = _broker.embedded
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
# Results are never read back: tasks write their outcome to the database.
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = "atlas"
# Artifact analysis and collection run on a queue of their own, consumed by a worker of their
# own (`celery worker -Q artifacts`, see deploy/Procfile): one analysis may take minutes and
# gigabytes, and on the shared queue two hostile traces held every worker process while polls
# and heartbeats waited (issue 19, finding 3). Polls, heartbeats and evaluation stay on "atlas".
ATLAS_ARTIFACT_QUEUE = "artifacts"
CELERY_TASK_ROUTES = {
    "artifacts.analyse": {"queue": ATLAS_ARTIFACT_QUEUE},
    "artifacts.collect": {"queue": ATLAS_ARTIFACT_QUEUE},
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_WORKER_SEND_TASK_EVENTS = False
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
ATLAS_HEARTBEAT_SECONDS = env.env_int(ENVIRON, "ATLAS_HEARTBEAT_SECONDS", 15, minimum=1)
CELERY_BEAT_SCHEDULE = {
    "worker-heartbeat": {
        "task": "probes.record_heartbeat",
        "schedule": float(ATLAS_HEARTBEAT_SECONDS),
        "options": {"expires": float(ATLAS_HEARTBEAT_SECONDS)},
    },
    "prune-raw-data": {
        "task": "probes.prune_raw_data",
        "schedule": 3600.0,
        "options": {"expires": 3600.0},
    },
    "dispatch-polls": {
        "task": "investigations.dispatch_polls",
        "schedule": 2.0,  # finer than any poll interval; due_polls skips polled cycles
        "options": {"expires": 2.0},
    },
}

# --- Probes -------------------------------------------------------------------------------
# Networks probes may connect to. Link-local and cloud-metadata addresses are refused
# whatever this says (probes/net.py).
try:
    from probes.net import parse_networks

    ATLAS_PROBE_ALLOWED_NETWORKS = parse_networks(
        env.env_list(ENVIRON, "ATLAS_PROBE_ALLOWED_NETWORKS", default=("127.0.0.0/8", "::1/128"))
    )
except ValueError as exc:
    raise ImproperlyConfigured(f"ATLAS_PROBE_ALLOWED_NETWORKS: {exc}.") from None
ATLAS_PROBE_MAX_BYTES = env.env_int(
    ENVIRON, "ATLAS_PROBE_MAX_BYTES", 8 * 1024 * 1024, minimum=1024, maximum=256 * 1024 * 1024
)
ATLAS_PROBE_TIMEOUT = env.env_int(ENVIRON, "ATLAS_PROBE_TIMEOUT", 8, minimum=1, maximum=120)
# Raw polls/observations outside any investigation window are deleted after this.
ATLAS_RAW_RETENTION_HOURS = env.env_int(
    ENVIRON, "ATLAS_RAW_RETENTION_HOURS", 48, minimum=1, maximum=24 * 365
)
# Every enabled target is also polled at this light cadence while no investigation is open,
# so an investigation opened after the peak still has the minutes before it (0: off).
ATLAS_LIGHT_POLL_SECONDS = env.env_int(
    ENVIRON, "ATLAS_LIGHT_POLL_SECONDS", 30, minimum=0, maximum=3600
)
# The bearer token the console sends to the control endpoints of the simulators it runs
# (demo, drill range: enginesim --control-token-file); without it anyone who can read a
# drill range's URL can read its ground truth. ./atlas demo generates one per data folder.
ATLAS_SIM_CONTROL_TOKEN = ENVIRON.get("ATLAS_SIM_CONTROL_TOKEN", "").strip()

# --- Chat (status updates to Slack, Mattermost, Microsoft Teams) ---------------------------
# Where chat webhooks may connect, through the probes' guard (link-local and metadata are
# refused whatever this says). Defaults to the probes' networks; a hosted chat needs its
# public range, e.g. "0.0.0.0/0,::/0".
try:
    ATLAS_CHAT_ALLOWED_NETWORKS = parse_networks(
        env.env_list(
            ENVIRON,
            "ATLAS_CHAT_ALLOWED_NETWORKS",
            default=tuple(str(n) for n in ATLAS_PROBE_ALLOWED_NETWORKS),
        )
    )
except ValueError as exc:
    raise ImproperlyConfigured(f"ATLAS_CHAT_ALLOWED_NETWORKS: {exc}.") from None
ATLAS_CHAT_TIMEOUT = env.env_int(ENVIRON, "ATLAS_CHAT_TIMEOUT", 10, minimum=1, maximum=60)
# Seconds before each retry of a delivery that failed transiently (refused, timeout, 5xx,
# 429); after the last, it is marked failed on the team page. The default rides out about
# 18 minutes of a chat outage.
try:
    ATLAS_CHAT_RETRY_SCHEDULE = tuple(
        float(x)
        for x in env.env_list(
            ENVIRON, "ATLAS_CHAT_RETRY_SCHEDULE", default=("10", "30", "60", "120", "300", "600")
        )
    )
except ValueError:
    raise ImproperlyConfigured(
        "ATLAS_CHAT_RETRY_SCHEDULE: a comma-separated list of seconds."
    ) from None
# The console's own address, for links in chat messages ("" leaves them out).
ATLAS_PUBLIC_URL = env.env_str(ENVIRON, "ATLAS_PUBLIC_URL").rstrip("/")

# Folders on GPU hosts whose files log_file targets may read; none by default.
ATLAS_LOG_FILE_ROOTS = [Path(p) for p in env.env_list(ENVIRON, "ATLAS_LOG_FILE_ROOTS")]
for _root in ATLAS_LOG_FILE_ROOTS:
    if not _root.is_absolute():
        raise ImproperlyConfigured(f"ATLAS_LOG_FILE_ROOTS item {str(_root)!r} must be absolute.")

# Profiler artifacts (uploads and probe-collected files): size bounds and analysis time.
ATLAS_ARTIFACT_MAX_BYTES = env.env_int(
    ENVIRON, "ATLAS_ARTIFACT_MAX_BYTES", 256 * 1024 * 1024, minimum=1024, maximum=8 * 1024**3
)
ATLAS_ARTIFACT_MAX_EXPANDED_BYTES = env.env_int(
    ENVIRON,
    "ATLAS_ARTIFACT_MAX_EXPANDED_BYTES",
    4 * 1024**3,
    minimum=1024,
    maximum=64 * 1024**3,
)
ATLAS_ARTIFACT_TIME_LIMIT = env.env_int(
    ENVIRON, "ATLAS_ARTIFACT_TIME_LIMIT", 600, minimum=5, maximum=3000
)
if _visibility <= ATLAS_ARTIFACT_TIME_LIMIT + 60:
    raise ImproperlyConfigured(
        "ATLAS_BROKER_VISIBILITY_TIMEOUT must exceed ATLAS_ARTIFACT_TIME_LIMIT + 60 s, or an "
        "artifact still being analysed would be delivered a second time."
    )
# Bytes of artifacts one team may keep (0: no quota). Without it any responder, API token or
# profiler endpoint could fill the disk (issue 19, finding 3: 20 x the same 5 MB kept).
ATLAS_ARTIFACT_TEAM_QUOTA_BYTES = env.env_int(
    ENVIRON, "ATLAS_ARTIFACT_TEAM_QUOTA_BYTES", 20 * 1024**3, minimum=0
)
ATLAS_ARTIFACT_FETCH_TIMEOUT = env.env_int(
    ENVIRON, "ATLAS_ARTIFACT_FETCH_TIMEOUT", 60, minimum=1, maximum=600
)
# Django must spool uploads to disk, never hold them in memory, and refuse past the bound.
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024

# --- Logging ------------------------------------------------------------------------------
LOG_LEVEL = env.env_choice(
    ENVIRON, "ATLAS_LOG_LEVEL", ("debug", "info", "warning", "error"), "info"
).upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "INFO"},
        # httpx logs every request at INFO: a thousand lines per poll cycle.
        "httpx": {"level": "WARNING"},
        "httpcore": {"level": "WARNING"},
        # django-axes logs its version at every process start and each failed log-in at
        # INFO; its lockouts (WARNING) and audit.lockouts' lines are the ones that matter.
        "axes": {"level": "WARNING"},
        # torch (test-only, for memory-snapshot parity) logs cache stats at exit.
        "torch": {"level": "WARNING"},
    },
}
