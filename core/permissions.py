"""DRF permission classes built on core.roles."""
from rest_framework.permissions import SAFE_METHODS, BasePermission

from .authentication import scope_missing
from .roles import is_operator


class IsOperator(BasePermission):
    message = "Only operators may do this."

    def has_permission(self, request, view) -> bool:
        if is_operator(request.user):
            return True
        # A scoped token of an operator: say which scope is missing, not that they are no operator.
        self.message = scope_missing(request, "operate") or IsOperator.message
        return False


class ReadOnlyOrOperator(BasePermission):
    message = "Only operators may change this."

    def has_permission(self, request, view) -> bool:
        if not request.user.is_authenticated:
            return False
        if request.method in SAFE_METHODS or is_operator(request.user):
            return True
        self.message = scope_missing(request, "operate") or ReadOnlyOrOperator.message
        return False
