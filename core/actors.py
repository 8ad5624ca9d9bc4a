"""The 'who' of a state change: a person, a person through an API token, or an automation."""
from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser

from .models import PersonalAccessToken

AUTOMATION_PREFIX = "automation:"
NODE_AGENT_PREFIX = "automation:agent:"
TOKEN_MARK = " (token "


@dataclass(frozen=True)
class Actor:
    label: str
    user: AbstractBaseUser | None = None

    @classmethod
    def for_user(cls, user: AbstractBaseUser, *, token: PersonalAccessToken | None = None) -> Actor:
        name = user.get_username()
        # The prefix names which of the person's tokens it was, so a leaked one can be traced.
        return cls(label=f"{name}{TOKEN_MARK}{token.prefix}…)" if token is not None else name, user=user)

    @classmethod
    def automation(cls, name: str) -> Actor:
        return cls(label=f"{AUTOMATION_PREFIX}{name}")

    @classmethod
    def from_request(cls, request) -> Actor:
        auth = getattr(request, "auth", None)
        return cls.for_user(request.user, token=auth if isinstance(auth, PersonalAccessToken) else None)
