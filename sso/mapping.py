"""Applying the IdP's groups to team memberships at each SSO sign-in.

The mapping owns exactly the teams it names: in those, the membership follows the groups
(created, role changed, removed), each change one audit entry in the same transaction as
the change. Teams the mapping does not name are left to their commanders, so locally
managed teams and SSO-managed ones can live side by side. A mapped team that does not
exist yet is created (a self-hosting team then only writes the variable). One rule of
``teams.actions`` still holds: a team never loses its last commander, so a demotion or
removal that would leave none is skipped and said so.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.db import transaction

import audit
from sso.config import GroupRole, roles_for
from teams.models import Membership, Role, Team

log = logging.getLogger(__name__)
ACTOR = "single sign-on (group mapping)"


@dataclass
class Outcome:
    """What one sign-in did, for the message the user sees on arrival."""

    teams: dict[str, str] = field(default_factory=dict)  # mapped team -> role now held
    changes: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # changes refused (last commander)


def _other_commanders(team: Team, membership: Membership) -> bool:
    return (
        Membership.objects.select_for_update()
        .filter(team=team, role=Role.COMMANDER)
        .exclude(pk=membership.pk)
        .exists()
    )


@transaction.atomic
def apply(user, groups: list[str], rules: tuple[GroupRole, ...]) -> Outcome:
    wanted = roles_for(groups, rules)
    outcome = Outcome()
    username = user.get_username()
    data_base = {"user": username, "source": "sso", "groups": sorted(groups)[:50]}
    for name in sorted({rule.team for rule in rules}):
        role = wanted.get(name)
        team = Team.objects.filter(name=name).first()
        if team is None:
            if role is None:
                continue
            team = Team.objects.create(name=name)
            audit.record(
                "team.create",
                actor_name=ACTOR,
                team=team,
                obj=team,
                summary=f"Created {name} (named by ATLAS_OIDC_GROUP_ROLES)",
                data={**data_base},
            )
        membership = Membership.objects.select_for_update().filter(team=team, user=user).first()
        if role is not None and membership is None:
            membership = Membership.objects.create(team=team, user=user, role=role)
            audit.record(
                "member.add",
                actor_name=ACTOR,
                team=team,
                obj=membership,
                summary=f"Added {username} as {Role(role).label.lower()} (IdP groups)",
                data={**data_base, "role": role},
            )
            outcome.changes.append(f"joined {name} as {role}")
        elif membership is not None and membership.role != role:
            if membership.role == Role.COMMANDER and not _other_commanders(team, membership):
                log.warning("SSO: kept %s commander of %s (last commander)", username, name)
                outcome.kept.append(
                    f"still commander of {name}: a team needs at least one commander"
                )
                role = Role.COMMANDER
            elif role is None:
                before = membership.role
                audit.record(
                    "member.remove",
                    actor_name=ACTOR,
                    team=team,
                    obj=membership,
                    summary=f"Removed {username} (was {before}; IdP groups map to no role)",
                    data={**data_base, "from": before},
                )
                membership.delete()
                outcome.changes.append(f"left {name}")
            else:
                before = membership.role
                membership.role = role
                membership.save(update_fields=["role"])
                audit.record(
                    "member.role",
                    actor_name=ACTOR,
                    team=team,
                    obj=membership,
                    summary=f"{username}: {before} -> {role} (IdP groups)",
                    data={**data_base, "from": before, "to": role},
                )
                outcome.changes.append(f"{name}: {before} -> {role}")
        if role is not None:
            outcome.teams[name] = role
    return outcome
