"""Every page needs a login; the API and /metrics answer with their own 401/403 instead of a
redirect, since scripts and Prometheus cannot follow a login form.

A NUL character in the URL (`%00` in the path or the query) is answered 400 before anything
looks it up: PostgreSQL refuses NUL in a text parameter, so a lookup by it would be a 500."""
from django.contrib.auth.middleware import LoginRequiredMiddleware as DjangoLoginRequired
from django.http import HttpResponseBadRequest, JsonResponse

EXEMPT_PREFIXES = ("/api/", "/metrics", "/static/")
NUL_IN_URL = "NUL characters are not allowed in the URL."


class LoginRequiredMiddleware(DjangoLoginRequired):
    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.path_info.startswith(EXEMPT_PREFIXES):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)


class RefuseNulInUrlMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        query = request.GET.lists()
        if "\x00" in request.path_info or any("\x00" in k or any("\x00" in v for v in vs) for k, vs in query):
            if request.path_info.startswith("/api/"):
                return JsonResponse({"detail": NUL_IN_URL}, status=400)
            return HttpResponseBadRequest(NUL_IN_URL, content_type="text/plain")
        return self.get_response(request)
