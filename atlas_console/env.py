"""Strict parsing of the environment into settings values.

Every function takes the environment as a mapping so that tests can check the
rules without reloading Django settings. A bad value raises
``ImproperlyConfigured`` naming the variable and the offending value, so a
misconfigured deployment fails at start-up instead of at 3 a.m. mid-incident.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

TRUE_WORDS = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS = frozenset({"0", "false", "no", "off", ""})

ENVIRONMENTS = ("development", "production")
DATABASE_SCHEMES = {"postgres", "postgresql", "sqlite"}
BROKER_SCHEMES = {"redis", "rediss", "filesystem"}


def _fail(name: str, value: str, expected: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{name}={value!r} is invalid: expected {expected}.")


def env_str(environ: Mapping[str, str], name: str, default: str = "") -> str:
    return environ.get(name, default).strip()


def env_bool(environ: Mapping[str, str], name: str, default: bool) -> bool:
    if name not in environ:
        return default
    raw = environ[name].strip().lower()
    if raw in TRUE_WORDS:
        return True
    if raw in FALSE_WORDS:
        return False
    raise _fail(name, environ[name], "one of 1/0, true/false, yes/no, on/off")


def env_int(
    environ: Mapping[str, str],
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    if name not in environ:
        return default
    raw = environ[name].strip()
    bounds = f"an integer in [{minimum if minimum is not None else '-inf'}, "
    bounds += f"{maximum if maximum is not None else 'inf'}]"
    try:
        value = int(raw, 10)
    except ValueError:
        raise _fail(name, raw, bounds) from None
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise _fail(name, raw, bounds)
    return value


def env_choice(
    environ: Mapping[str, str], name: str, choices: tuple[str, ...], default: str
) -> str:
    raw = environ.get(name, default).strip().lower()
    if raw not in choices:
        raise _fail(name, raw, "one of " + ", ".join(choices))
    return raw


def env_list(environ: Mapping[str, str], name: str, default: tuple[str, ...] = ()) -> list[str]:
    """Comma-separated list; empty items are an error, not silently dropped."""
    if name not in environ:
        return list(default)
    raw = environ[name].strip()
    if not raw:
        return []
    items = [item.strip() for item in raw.split(",")]
    if any(not item for item in items):
        raise _fail(name, raw, "a comma-separated list without empty items")
    return items


def database_config(url: str, data_dir: Path, *, conn_max_age: int = 60) -> dict:
    """Django DATABASES['default'] for DATABASE_URL, or embedded SQLite when unset.

    Only PostgreSQL (production, CI) and SQLite (the one-command demo) are
    supported: full-text search and row locking are written for those two.
    ``conn_max_age`` is PostgreSQL's persistent-connection lifetime (0 under the gevent
    web worker, whose greenlets would each keep one: deploy/gunicorn.conf.py).
    """
    if not url:
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(data_dir / "atlas.sqlite3"),
            "OPTIONS": {"timeout": 20, "transaction_mode": "IMMEDIATE"},
            "TEST": {"NAME": str(data_dir / "test-atlas.sqlite3")},
        }
    import dj_database_url

    scheme = urlsplit(url).scheme.lower()
    if scheme not in DATABASE_SCHEMES:
        raise _fail("DATABASE_URL", _redact(url), "a postgres:// or sqlite:/// URL")
    try:
        config = dj_database_url.parse(url, conn_max_age=conn_max_age, conn_health_checks=True)
    except Exception as exc:  # dj-database-url raises several types for bad URLs
        raise _fail("DATABASE_URL", _redact(url), f"a parseable URL ({exc})") from None
    if scheme == "sqlite":
        config.pop("CONN_MAX_AGE", None)
        config.pop("CONN_HEALTH_CHECKS", None)
        config.setdefault("OPTIONS", {}).update({"timeout": 20, "transaction_mode": "IMMEDIATE"})
    elif not config.get("NAME"):
        raise _fail("DATABASE_URL", _redact(url), "a database name in the URL path")
    return config


@dataclass(frozen=True)
class BrokerConfig:
    url: str
    transport_options: dict
    embedded: bool


def broker_config(url: str, data_dir: Path, *, visibility_timeout: int) -> BrokerConfig:
    """Celery broker: Redis when CELERY_BROKER_URL is set, kombu's filesystem transport if not.

    The filesystem transport needs its folders to exist before a worker starts,
    and its ``control_folder`` set explicitly so that remote control (inspect,
    ping) works without writing into the current directory.
    """
    if not url or url.lower() == "filesystem://":
        base = data_dir / "broker"
        folders = {
            "data_folder_in": base / "queue",
            "data_folder_out": base / "queue",
            "control_folder": base / "control",
            "processed_folder": base / "processed",
        }
        for folder in folders.values():
            folder.mkdir(parents=True, exist_ok=True)
        options = {key: str(path) for key, path in folders.items()}
        options["store_processed"] = False
        return BrokerConfig(url="filesystem://", transport_options=options, embedded=True)
    parts = urlsplit(url)
    if parts.scheme.lower() not in BROKER_SCHEMES:
        raise _fail("CELERY_BROKER_URL", _redact(url), "a redis://, rediss:// or filesystem:// URL")
    if not parts.hostname:
        raise _fail("CELERY_BROKER_URL", _redact(url), "a host name in the URL")
    try:
        parts.port  # noqa: B018 - raises ValueError for a non-numeric port
    except ValueError:
        raise _fail("CELERY_BROKER_URL", _redact(url), "a numeric port") from None
    options = {
        # A message not acknowledged within this window is redelivered. It must
        # outlive the hard time limit or a long task would run twice.
        "visibility_timeout": visibility_timeout,
        "socket_timeout": 10,
        "socket_connect_timeout": 5,
        "retry_on_timeout": True,
        "health_check_interval": 30,
    }
    return BrokerConfig(url=url, transport_options=options, embedded=False)


def _redact(url: str) -> str:
    """Keep passwords out of error messages and logs."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return parts._replace(netloc=netloc).geturl()
    return url
