"""DRF permission classes built on core.roles."""
from rest_framework.permissions import SAFE_METHODS, BasePermission

from .roles import is_operator


class IsOperator(BasePermission):
    message = "Only operators may do this."

    def has_permission(self, request, view) -> bool:
        return is_operator(request.user)


class ReadOnlyOrOperator(BasePermission):
    message = "Only operators may change this."

    def has_permission(self, request, view) -> bool:
        if not request.user.is_authenticated:
            return False
        return request.method in SAFE_METHODS or is_operator(request.user)
