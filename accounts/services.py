"""Single sign-on: the provider's claims decide, at every login, who a person is in Fleetdeck,
whether they are an operator and which teams they belong to.

Groups map to roles (OIDC_GROUP_ROLES, e.g. gpu-operators=operator) and teams
(OIDC_GROUP_TEAMS, e.g. team-research=research). The mapping is the whole truth for a person who
logs in through the provider: leaving a group at the provider removes the role or membership at
their next login. Every change is audited, with the groups that caused it."""
from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.exceptions import SuspiciousOperation
from django.db import transaction

from core.actors import Actor
from core.audit import audit_record
from core.roles import OPERATORS_GROUP
from scheduling.models import Team, TeamMembership

from .models import OidcIdentity

log = logging.getLogger(__name__)
SSO_ACTOR = Actor.automation("sso")
OPERATOR_ROLE = "operator"  # any other role in OIDC_GROUP_ROLES (e.g. viewer) is what everyone has


@dataclass(frozen=True)
class Claims:
    """What Fleetdeck reads from a verified ID token (and the userinfo answer)."""

    issuer: str
    subject: str
    username: str
    email: str
    first_name: str
    last_name: str
    groups: tuple[str, ...]

    @classmethod
    def from_dict(cls, claims: dict, *, issuer: str) -> Claims:
        subject = str(claims.get("sub") or "")
        if not subject:
            raise SuspiciousOperation("The ID token has no subject (sub).")
        raw_groups = claims.get(settings.OIDC_GROUPS_CLAIM) or []
        if isinstance(raw_groups, str):
            raw_groups = [raw_groups]
        username = str(claims.get("preferred_username") or claims.get("email") or subject)[:150]
        return cls(
            issuer=issuer, subject=subject, username=username, email=str(claims.get("email") or "")[:254],
            first_name=str(claims.get("given_name") or "")[:150], last_name=str(claims.get("family_name") or "")[:150],
            groups=tuple(sorted({str(g) for g in raw_groups})),
        )


def _wanted(groups: tuple[str, ...]) -> tuple[bool, set[str]]:
    """(operator?, team names) that the groups map to."""
    operator = any(settings.OIDC_GROUP_ROLES.get(g) == OPERATOR_ROLE for g in groups)
    teams = {settings.OIDC_GROUP_TEAMS[g] for g in groups if g in settings.OIDC_GROUP_TEAMS}
    return operator, teams


def _user_for(claims: Claims) -> tuple[User, bool]:
    identity = OidcIdentity.objects.select_related("user").filter(issuer=claims.issuer, subject=claims.subject).first()
    if identity is not None:
        return identity.user, False
    if User.objects.filter(username=claims.username).exists():
        # Linking by name would let whoever controls that name at the provider take over a local
        # account (the break-glass admin's, say): an operator links them deliberately instead.
        raise SuspiciousOperation(f"A local account named {claims.username!r} exists and is not linked to this "
                                  "provider's subject.")
    user = User.objects.create_user(username=claims.username, email=claims.email, first_name=claims.first_name,
                                    last_name=claims.last_name)
    user.set_unusable_password()
    user.save(update_fields=["password"])
    OidcIdentity.objects.create(user=user, issuer=claims.issuer, subject=claims.subject)
    return user, True


def _teams_sync(user: User, wanted: set[str]) -> tuple[list[str], list[str]]:
    teams = {t.name: t for t in Team.objects.filter(name__in=wanted)}
    for missing in sorted(wanted - set(teams)):
        log.warning("OIDC_GROUP_TEAMS maps to team %r, which does not exist; %s not added", missing, user)
    current = {m.team.name: m for m in TeamMembership.objects.filter(user=user).select_related("team")}
    added = sorted(set(teams) - set(current))
    removed = sorted(set(current) - set(teams))
    TeamMembership.objects.bulk_create(TeamMembership(team=teams[name], user=user) for name in added)
    TeamMembership.objects.filter(pk__in=[current[name].pk for name in removed]).delete()
    return added, removed


def _operator_sync(user: User, wanted: bool) -> bool | None:
    """Add or remove the operators group; returns the new value if it changed."""
    group, _ = Group.objects.get_or_create(name=OPERATORS_GROUP)
    has = user.groups.filter(pk=group.pk).exists()
    if has == wanted:
        return None
    (user.groups.add if wanted else user.groups.remove)(group)
    return wanted


@transaction.atomic
def sso_login_apply(*, claims: Claims) -> User:
    """The Fleetdeck user for a verified login: created at the first, and at every login given
    the operator role and team memberships the provider's groups map to."""
    user, created = _user_for(claims)
    profile = {"email": claims.email, "first_name": claims.first_name, "last_name": claims.last_name}
    changed_profile = {k: v for k, v in profile.items() if getattr(user, k) != v}
    if changed_profile:
        User.objects.filter(pk=user.pk).update(**changed_profile)
    operator, teams = _wanted(claims.groups)
    added, removed = _teams_sync(user, teams)
    operator_now = _operator_sync(user, operator)
    OidcIdentity.objects.filter(user=user).update(last_login_groups=list(claims.groups))
    reason = f"groups at login: {', '.join(claims.groups) or 'none'}"
    if created:
        audit_record(actor=SSO_ACTOR, verb="user.sso_create", target=user, reason=reason,
                     after={"issuer": claims.issuer, "subject": claims.subject, "operator": operator,
                            "teams": sorted(teams & set(added))})
    elif added or removed or operator_now is not None or changed_profile:
        before = {"teams_removed": removed}
        after = {"teams_added": added, **({"operator": operator_now} if operator_now is not None else {}),
                 **changed_profile}
        audit_record(actor=SSO_ACTOR, verb="user.sso_sync", target=user, reason=reason, before=before, after=after)
    user.refresh_from_db()
    return user
