"""`Authorization: Token <key>` with a personal access token: expiry, revocation and scopes.

A scoped token narrows what its owner may do for that request (core.roles reads the narrowing),
so every permission check, in views and in services alike, sees the token's rights and not the
person's. A read-only token is refused any write here, before a view runs, naming its scope."""
from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from rest_framework import authentication, exceptions
from rest_framework.permissions import SAFE_METHODS

from .models import PersonalAccessToken, TokenScope
from .roles import restrict_to_scopes
from .tokens import TokenRefused, token_authenticate


class PersonalAccessTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Token"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0] != self.keyword:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header: expected 'Token <key>'.")
        try:
            token = token_authenticate(header[1])
        except TokenRefused as exc:
            raise exceptions.AuthenticationFailed(str(exc)) from None
        if token.scopes and set(token.scopes) <= {TokenScope.READ} and request.method not in SAFE_METHODS:
            raise exceptions.PermissionDenied(
                f"Token {token.prefix}… has the 'read' scope only; this {request.method} needs a token "
                f"with the 'submit' or 'operate' scope."
            )
        restrict_to_scopes(token.user, token.scopes)
        return token.user, token

    def authenticate_header(self, request) -> str:
        return self.keyword


def scope_missing(request, scope: str) -> str | None:
    """The reason a request's token lacks `scope`, or None (no token, an unscoped one, or it has it)."""
    token = getattr(request, "auth", None)
    if isinstance(token, PersonalAccessToken) and token.scopes and scope not in token.scopes:
        return f"Token {token.prefix}… lacks the '{scope}' scope ({', '.join(token.scopes)})."
    return None


class PersonalAccessTokenScheme(OpenApiAuthenticationExtension):
    target_class = "core.authentication.PersonalAccessTokenAuthentication"
    name = "personalAccessToken"

    def get_security_definition(self, auto_schema):
        return build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Token")
