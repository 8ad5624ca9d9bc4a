"""The site's 404 handler: under /api/ a JSON body like every other API error (a path whose id is
not a number never reaches a view, so DRF cannot answer it), elsewhere Django's page."""
from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import page_not_found


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": "Not found."}, status=404)
    return page_not_found(request, exception)
