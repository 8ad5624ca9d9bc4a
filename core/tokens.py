"""Personal access tokens: issue, revoke, and look one up from the key a script sends.

The key is shown once, at creation; the database holds its SHA-256 only, so a leaked backup
holds no usable credential. Keys are 32 random bytes, which is why an unsalted hash suffices."""
from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from .actors import Actor
from .audit import audit_record
from .models import PersonalAccessToken, TokenScope

KEY_PREFIX = "fdp_"
PREFIX_LENGTH = 12  # "fdp_" and 8 random characters: enough to tell a user's tokens apart
DEFAULT_DAYS = 90
MAX_DAYS = 365
MAX_NAME_LENGTH = 100
# last_used_at is written at most this often per token: a script polling every second must not
# turn every read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def _validated(*, name: str, days: int, scopes: list[str]) -> tuple[str, list[str]]:
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": ["Give the token a name, e.g. what script uses it."]})
    if len(name) > MAX_NAME_LENGTH:
        raise ValidationError({"name": [f"At most {MAX_NAME_LENGTH} characters."]})
    if not isinstance(days, int) or isinstance(days, bool) or not 1 <= days <= MAX_DAYS:
        raise ValidationError({"expires_in_days": [f"Must be a whole number of days from 1 to {MAX_DAYS}."]})
    unknown = sorted(set(scopes) - set(TokenScope.values))
    if unknown:
        choices = ", ".join(TokenScope.values)
        raise ValidationError({"scopes": [f"Unknown scope {unknown[0]!r}; choose from {choices}."]})
    return name, sorted(set(scopes))


@transaction.atomic
def token_create(
    *, user, name: str, actor: Actor, days: int = DEFAULT_DAYS, scopes: list[str] | None = None,
    now: datetime | None = None,
) -> tuple[PersonalAccessToken, str]:
    """Issue a token for `user`; returns the row and the clear key (shown once, never stored)."""
    name, scopes = _validated(name=name, days=days, scopes=list(scopes or []))
    now = now or timezone.now()
    key = _new_key()
    token = PersonalAccessToken(
        user=user, name=name, prefix=key[:PREFIX_LENGTH], key_hash=key_hash(key), scopes=scopes,
        created_at=now, expires_at=now + timedelta(days=days),
    )
    token.full_clean()
    token.save()
    audit_record(actor=actor, verb="token.create", target=token,
                 after={"user": user.get_username(), "scopes": scopes, "expires_at": token.expires_at.isoformat()})
    return token, key


@transaction.atomic
def token_revoke(*, token: PersonalAccessToken, actor: Actor, now: datetime | None = None) -> PersonalAccessToken:
    """Revoke a token: the next request that sends it is refused. Revoking twice is a no-op."""
    now = now or timezone.now()
    claimed = PersonalAccessToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now)
    token.refresh_from_db(fields=["revoked_at"])
    if claimed:
        audit_record(actor=actor, verb="token.revoke", target=token, before={"revoked": False},
                     after={"revoked": True})
    return token


class TokenRefused(Exception):
    """The key names no usable token; the message says why (for the 401)."""


def token_authenticate(key: str, *, now: datetime | None = None) -> PersonalAccessToken:
    """The usable token for `key`, its user loaded; raises TokenRefused naming why not."""
    now = now or timezone.now()
    token = PersonalAccessToken.objects.select_related("user").filter(key_hash=key_hash(key)).first()
    if token is None:
        raise TokenRefused("Invalid token.")
    if token.revoked_at is not None:
        raise TokenRefused(f"Token {token.prefix}… was revoked.")
    if token.expires_at <= now:
        raise TokenRefused(f"Token {token.prefix}… expired on {token.expires_at:%Y-%m-%d %H:%M} UTC.")
    if not token.user.is_active:
        raise TokenRefused("The token's user is inactive.")
    _touch(token, now)
    return token


def _touch(token: PersonalAccessToken, now: datetime) -> None:
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_RESOLUTION:
        return
    # Conditional: of two requests racing past the check above, one writes.
    stale = Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    PersonalAccessToken.objects.filter(stale, pk=token.pk).update(last_used_at=now)
    token.last_used_at = now


def tokens_of(user) -> list[PersonalAccessToken]:
    return list(PersonalAccessToken.objects.filter(user=user))
