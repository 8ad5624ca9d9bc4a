from django.conf import settings

from .roles import is_operator, role_of


def roles(request):
    user = request.user
    return {"is_operator": is_operator(user), "user_role": role_of(user) if user.is_authenticated else ""}


def live_refresh(request):
    """How often the self-refreshing pages (overview, queues) re-fetch themselves."""
    return {"live_refresh_seconds": settings.LIVE_REFRESH_SECONDS}
