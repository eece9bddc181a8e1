"""Run the test IdP, or change it while it runs.

``python -m tests.sso.idp.serve serve PORT SEED_JSON``: migrate, create the client and the
users of ``SEED_JSON`` (``{"client": {...}, "users": [...]}``), then serve on 127.0.0.1.
``python -m tests.sso.idp.serve set-groups USERNAME [GROUP ...]``: the "role change at the
IdP" of the tests, written to the same SQLite file (``IDP_DB``).
"""

from __future__ import annotations

import json
import os
import sys


def _setup() -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.sso.idp.settings"
    import django

    django.setup()


def _set_groups(username: str, groups: list[str]) -> None:
    from django.contrib.auth.models import Group, User

    user = User.objects.get(username=username)
    user.groups.set([Group.objects.get_or_create(name=name)[0] for name in groups])


def _seed(seed: dict) -> None:
    from django.contrib.auth.models import User
    from oauth2_provider.models import Application

    client = seed["client"]
    Application.objects.create(
        name="Atlas Console",
        client_id=client["id"],
        client_secret=client["secret"],  # hashed on save
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=client["redirect_uri"],
        algorithm=Application.RS256_ALGORITHM,
        skip_authorization=False,  # the consent page is part of the walk
    )
    for person in seed["users"]:
        User.objects.create_user(person["username"], person["email"], person["password"])
        _set_groups(person["username"], person["groups"])


def main(argv: list[str]) -> None:
    _setup()
    from django.core.management import call_command

    if argv[0] == "serve":
        port, seed = argv[1], json.loads(argv[2])
        call_command("migrate", verbosity=0)
        _seed(seed)
        call_command("runserver", f"127.0.0.1:{port}", use_reloader=False, use_threading=True)
    elif argv[0] == "set-groups":
        _set_groups(argv[1], argv[2:])
    else:
        raise SystemExit(f"unknown command {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
