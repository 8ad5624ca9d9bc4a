"""Who of the subscribers hears about a workload: members of its team, and whoever submitted it."""
from __future__ import annotations

from collections import defaultdict

from scheduling.models import TeamMembership

from .models import NotificationSettings


def teams_of(subs: list[NotificationSettings]) -> dict[int, set[int]]:
    teams: dict[int, set[int]] = defaultdict(set)
    for user_id, team_id in TeamMembership.objects.filter(user_id__in=[s.user_id for s in subs]).values_list(
            "user_id", "team_id"):
        teams[user_id].add(team_id)
    return teams


def for_workload(workload, subs: list[NotificationSettings], teams: dict[int, set[int]]) -> list[NotificationSettings]:
    return [s for s in subs if workload.team_id in teams.get(s.user_id, ()) or workload.submitted_by_id == s.user_id]
