"""A login lockout is an audit entry (issue 19.7).

django-axes refuses a username and client address after too many failed log-ins
(settings: AXES_*); each time it locks a pair out it sends ``user_locked_out``, and this
receiver records it, so the team-less part of the log (the admin's audit list) shows who
was being guessed at, from where, and when. Axes sends the signal again for every attempt
it refuses while the lock holds; those add no entry (one per lockout, or a guessing loop
would fill the log with copies), only a log line, as axes' own WARNING does. The username
is whatever was typed: made storable (``safe_text``) and cut, never trusted.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

import audit
from audit.text import safe_text

log = logging.getLogger(__name__)
USERNAME_MAX = 150


def record_lockout(sender, request=None, username=None, ip_address=None, **kwargs) -> None:
    """``axes.signals.user_locked_out`` receiver: one ``login.lockout`` entry per lockout."""
    name = safe_text(str(username or ""))[:USERNAME_MAX]
    address = safe_text(str(ip_address or ""))[:64]
    path = safe_text(getattr(request, "path", "") or "")[:200]
    from audit.models import AuditEntry

    with transaction.atomic():
        since = timezone.now() - settings.AXES_COOLOFF_TIME
        if AuditEntry.objects.filter(
            action="login.lockout", at__gte=since, data__username=name, data__ip_address=address
        ).exists():
            log.info("login still locked out: username=%r ip=%s path=%s", name, address, path)
            return
        audit.record(
            "login.lockout",
            actor_name=f"login form ({address or 'unknown address'})",
            summary=f"Locked out {name!r} from {address or 'an unknown address'} at {path}",
            data={"username": name, "ip_address": address, "path": path},
        )
    log.warning("login locked out: username=%r ip=%s path=%s", name, address, path)
