"""The two ends of the OIDC login: off to the provider, and back with a code."""
from django.contrib.auth.decorators import login_not_required
from django.urls import path

from .oidc import OIDCCallbackView, OIDCLoginView

urlpatterns = [
    path("authenticate/", login_not_required(OIDCLoginView.as_view()), name="oidc_authentication_init"),
    path("callback/", login_not_required(OIDCCallbackView.as_view()), name="oidc_authentication_callback"),
]
