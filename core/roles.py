"""Roles: operator (group 'operators' or superuser), team member (member of a team), viewer.

One place answers "may this user do X", so views and API permissions never re-derive it."""
from __future__ import annotations

from collections.abc import Callable

from django.contrib.auth.models import AnonymousUser, User

OPERATORS_GROUP = "operators"
VIEWERS_GROUP = "viewers"

# user -> ids of the teams they belong to; scheduling (which owns teams) registers it in ready().
_team_ids_source: Callable[[User], frozenset[int]] = lambda user: frozenset()  # noqa: E731


def register_team_ids_source(source: Callable[[User], frozenset[int]]) -> None:
    global _team_ids_source
    _team_ids_source = source


def restrict_to_scopes(user: User, scopes: list[str]) -> None:
    """Narrow `user` (this request's instance) to a scoped API token's rights: without 'operate'
    they are no operator, without 'submit' no member of any team. No scopes: no narrowing."""
    if not scopes:
        return
    if "operate" not in scopes:
        user._fleetdeck_is_operator = False
    if "submit" not in scopes:
        user._fleetdeck_team_ids = frozenset()


def is_operator(user: User | AnonymousUser) -> bool:
    if not user.is_authenticated:
        return False
    cached = getattr(user, "_fleetdeck_is_operator", None)
    if cached is None:
        cached = user.is_superuser or user.groups.filter(name=OPERATORS_GROUP).exists()
        user._fleetdeck_is_operator = cached
    return cached


def team_ids(user: User | AnonymousUser) -> frozenset[int]:
    """Ids of the teams the user is a member of."""
    if not user.is_authenticated:
        return frozenset()
    cached = getattr(user, "_fleetdeck_team_ids", None)
    if cached is None:
        cached = _team_ids_source(user)
        user._fleetdeck_team_ids = cached
    return cached


def role_of(user: User | AnonymousUser) -> str:
    if is_operator(user):
        return "operator"
    if team_ids(user):
        return "team member"
    return "viewer"


def may_act_for_team(user: User | AnonymousUser, team_id: int) -> bool:
    return is_operator(user) or team_id in team_ids(user)
