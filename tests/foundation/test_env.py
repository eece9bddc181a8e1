"""Settings come from the environment and bad values stop the service at start-up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from atlas_console import env

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("raw", ["maybe", "2", "enabled"])
def test_it_rejects_a_boolean_that_is_not_one(raw):
    with pytest.raises(ImproperlyConfigured, match="ATLAS_DEBUG"):
        env.env_bool({"ATLAS_DEBUG": raw}, "ATLAS_DEBUG", default=False)


@pytest.mark.parametrize(("raw", "expected"), [("1", True), ("off", False), (" YES ", True)])
def test_it_reads_booleans(raw, expected):
    assert env.env_bool({"X": raw}, "X", default=not expected) is expected


@pytest.mark.parametrize("raw", ["ten", "1.5", "0", "99999"])
def test_it_rejects_integers_out_of_range_or_malformed(raw):
    with pytest.raises(ImproperlyConfigured, match="ATLAS_TASK_TIME_LIMIT"):
        env.env_int(
            {"ATLAS_TASK_TIME_LIMIT": raw}, "ATLAS_TASK_TIME_LIMIT", 5, minimum=1, maximum=100
        )


def test_it_rejects_empty_list_items():
    with pytest.raises(ImproperlyConfigured, match="without empty items"):
        env.env_list({"H": "a.example,,b.example"}, "H")


@pytest.mark.parametrize(
    "url", ["mysql://u@h/db", "postgres://user@host", "oracle://x", "redis://localhost/0"]
)
def test_it_rejects_unsupported_or_incomplete_database_urls(url, tmp_path):
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL"):
        env.database_config(url, tmp_path)


def test_it_hides_passwords_in_errors(tmp_path):
    with pytest.raises(ImproperlyConfigured) as caught:
        env.database_config("mysql://atlas:hunter2@db/atlas", tmp_path)
    assert "hunter2" not in str(caught.value)


def test_postgres_url_selects_postgres(tmp_path):
    config = env.database_config("postgres://atlas:pw@db.internal:5433/atlas", tmp_path)
    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert (config["HOST"], config["PORT"], config["NAME"]) == ("db.internal", 5433, "atlas")
    assert config["CONN_HEALTH_CHECKS"] is True


def test_no_database_url_is_embedded_sqlite_in_the_data_folder(tmp_path):
    config = env.database_config("", tmp_path)
    assert config["ENGINE"] == "django.db.backends.sqlite3"
    assert Path(config["NAME"]).parent == tmp_path


@pytest.mark.parametrize("url", ["amqp://guest@localhost//", "redis://", "redis://host:port/0"])
def test_it_rejects_unsupported_brokers(url, tmp_path):
    with pytest.raises(ImproperlyConfigured, match="CELERY_BROKER_URL"):
        env.broker_config(url, tmp_path, visibility_timeout=100)


def test_embedded_broker_creates_its_folders_including_control(tmp_path):
    broker = env.broker_config("", tmp_path, visibility_timeout=100)
    assert broker.embedded and broker.url == "filesystem://"
    for key in ("data_folder_in", "data_folder_out", "control_folder", "processed_folder"):
        folder = Path(broker.transport_options[key])
        assert folder.is_dir() and tmp_path in folder.parents


def test_redis_broker_gets_the_visibility_timeout(tmp_path):
    broker = env.broker_config("redis://127.0.0.1:6379/0", tmp_path, visibility_timeout=3600)
    assert not broker.embedded
    assert broker.transport_options["visibility_timeout"] == 3600


def _manage(args: list[str], extra_env: dict[str, str], tmp_path: Path):
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ATLAS_", "DATABASE_URL", "CELERY_"))
    }
    environment.update({"ATLAS_DATA_DIR": str(tmp_path), **extra_env})
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("ATLAS_DEBUG", "perhaps", "ATLAS_DEBUG='perhaps' is invalid"),
        ("ATLAS_ENV", "staging", "ATLAS_ENV='staging' is invalid"),
        ("ATLAS_TASK_TIME_LIMIT", "30", "must be greater than ATLAS_TASK_SOFT_TIME_LIMIT"),
        ("ATLAS_BROKER_VISIBILITY_TIMEOUT", "60", "must exceed ATLAS_TASK_TIME_LIMIT"),
        ("DATABASE_URL", "mysql://root@127.0.0.1/atlas", "DATABASE_URL"),
        ("CELERY_BROKER_URL", "amqp://guest@127.0.0.1//", "CELERY_BROKER_URL"),
        ("ATLAS_SECRET_KEY", "short", "at least 50 characters"),
        ("ATLAS_PROBE_ALLOWED_NETWORKS", "10.0.0.0/8,banana", "'banana' is not a network"),
    ],
)
def test_the_service_refuses_to_start_with_a_bad_value(variable, value, message, tmp_path):
    result = _manage(["check"], {variable: value}, tmp_path)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr


def test_production_requires_a_secret_key_and_hosts(tmp_path):
    result = _manage(["check"], {"ATLAS_ENV": "production"}, tmp_path)
    assert result.returncode != 0
    assert "ATLAS_SECRET_KEY is required" in result.stderr


def test_production_settings_pass_check_deploy_without_warnings(tmp_path):
    result = _manage(
        ["check", "--deploy", "--fail-level", "WARNING"],
        {
            "ATLAS_ENV": "production",
            "ATLAS_SECRET_KEY": "p" * 20 + "-production-like-secret-key-for-the-deploy-check-9f3",
            "ATLAS_ALLOWED_HOSTS": "atlas.example.com",
            "ATLAS_CSRF_TRUSTED_ORIGINS": "https://atlas.example.com",
            "DATABASE_URL": "postgres://atlas@127.0.0.1:5432/atlas",
            "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
        },
        tmp_path,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "no issues" in result.stdout


def test_check_deploy_flags_the_embedded_services_in_production(tmp_path):
    result = _manage(
        ["check", "--deploy"],
        {
            "ATLAS_ENV": "production",
            "ATLAS_SECRET_KEY": "s" * 60,
            "ATLAS_ALLOWED_HOSTS": "atlas.example.com",
        },
        tmp_path,
    )
    assert "atlas.W001" in result.stderr + result.stdout
    assert "atlas.W002" in result.stderr + result.stdout
