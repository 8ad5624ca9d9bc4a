"""Node agent token authentication: `Authorization: Bearer <token>` → the node it was issued for."""
from __future__ import annotations

from dataclasses import dataclass

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from rest_framework import authentication, exceptions
from rest_framework.permissions import BasePermission

from fleet.models import Node, NodeAgentToken


@dataclass(frozen=True)
class NodePrincipal:
    """request.user of an agent request: the node, never a person."""

    node: Node
    is_authenticated: bool = True
    is_anonymous: bool = False
    is_superuser: bool = False
    pk: None = None

    def get_username(self) -> str:
        return f"node:{self.node.name}"


class NodeTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).decode("latin-1").split()
        if not header or header[0] != self.keyword:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header: expected 'Bearer <token>'.")
        token = (
            NodeAgentToken.objects.select_related("node").filter(key_hash=NodeAgentToken.hash_key(header[1])).first()
        )
        if token is None:
            raise exceptions.AuthenticationFailed("Unknown node token.")
        return NodePrincipal(token.node), token

    def authenticate_header(self, request) -> str:
        return self.keyword


class IsNodeAgent(BasePermission):
    message = "A node agent token is required."

    def has_permission(self, request, view) -> bool:
        return isinstance(request.auth, NodeAgentToken)


class NodeTokenScheme(OpenApiAuthenticationExtension):
    """Documents the per-node bearer token in the OpenAPI schema."""

    target_class = "health.api.authentication.NodeTokenAuthentication"
    name = "nodeToken"

    def get_security_definition(self, auto_schema):
        return build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Bearer")
