from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from accounts.views import LoginView
from core.metrics import metrics_view

api_v1 = [
    path("", include("fleet.api.urls")),
    path("", include("scheduling.api.urls")),
    path("", include("health.api.urls")),
    path("", include("integrations.prometheus.urls")),
    path("", include("accounts.api_urls")),
    path("", include("console.api_urls")),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]

# JSON 404s under /api/ (core.errors).
handler404 = "core.errors.not_found"

# Browsers and tools that ignore <link rel="icon"> still ask for /favicon.ico, on the login page too:
# send them to the SVG in static/ (served offline by WhiteNoise) instead of a 404 per page.
favicon = login_not_required(RedirectView.as_view(url=static("favicon.svg"), permanent=True))

urlpatterns = [
    path("favicon.ico", favicon, name="favicon"),
    path("login/", LoginView.as_view(), name="login"),
    path("oidc/", include("accounts.oidc_urls")),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("account/", include("accounts.urls")),
    path("account/notifications/", include("notifications.urls")),
    path("admin/", admin.site.urls),
    path("metrics", metrics_view, name="metrics"),
    path("api/v1/", include(api_v1)),
    path("scheduling/", include("scheduling.urls")),
    path("health/", include("health.urls")),
    path("", include("console.urls")),
]
