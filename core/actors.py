"""The 'who' of a state change: a person, a person through an API token, or an automation."""
from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import AbstractBaseUser


@dataclass(frozen=True)
class Actor:
    label: str
    user: AbstractBaseUser | None = None

    @classmethod
    def for_user(cls, user: AbstractBaseUser, *, via_token: bool = False) -> Actor:
        name = user.get_username()
        return cls(label=f"{name} (API token)" if via_token else name, user=user)

    @classmethod
    def automation(cls, name: str) -> Actor:
        return cls(label=f"automation:{name}")

    @classmethod
    def from_request(cls, request) -> Actor:
        from rest_framework.authtoken.models import Token

        return cls.for_user(request.user, via_token=isinstance(getattr(request, "auth", None), Token))
