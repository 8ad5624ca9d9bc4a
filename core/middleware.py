"""Every page needs a login; the API and /metrics answer with their own 401/403 instead of a
redirect, since scripts and Prometheus cannot follow a login form."""
from django.contrib.auth.middleware import LoginRequiredMiddleware as DjangoLoginRequired

EXEMPT_PREFIXES = ("/api/", "/metrics", "/static/")


class LoginRequiredMiddleware(DjangoLoginRequired):
    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.path_info.startswith(EXEMPT_PREFIXES):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)
