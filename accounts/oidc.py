"""OpenID Connect login through mozilla-django-oidc (authorization code flow with PKCE).

mozilla-django-oidc does the protocol (state, nonce, PKCE, the token exchange, the JWKS lookup);
this module adds what it leaves to us: the endpoints discovered from the issuer's
/.well-known/openid-configuration, a complete check of the ID token (signature, expiry,
issuer, audience), users keyed by the provider's subject, and the groups → roles/teams sync
(accounts.services) at every login. A refused login returns to the login page with the reason."""
from __future__ import annotations

import logging
import threading

import jwt
import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation
from django.shortcuts import redirect
from django.views.generic import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from .services import Claims, sso_login_apply

log = logging.getLogger(__name__)
DISCOVERED = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}
_discovery: dict[str, dict] = {}
_discovery_lock = threading.Lock()


def oidc_enabled() -> bool:
    return bool(settings.OIDC_ISSUER_URL)


def discovery_document(issuer: str) -> dict:
    """The issuer's discovery document, fetched once per process, at the first login that needs it:
    fetching it at start-up would keep Fleetdeck from starting while the provider is down, and
    local logins must work then."""
    with _discovery_lock:
        if issuer not in _discovery:
            url = issuer.rstrip("/") + "/.well-known/openid-configuration"
            response = requests.get(url, timeout=settings.OIDC_TIMEOUT)
            response.raise_for_status()
            document = response.json()
            if document.get("issuer", "").rstrip("/") != issuer.rstrip("/"):
                raise ImproperlyConfigured(f"{url} names issuer {document.get('issuer')!r}, not {issuer!r}")
            _discovery[issuer] = document
        return _discovery[issuer]


def oidc_setting(attr: str, *args):
    """mozilla-django-oidc's settings lookup, with the endpoints left unset filled in by discovery."""
    if attr in DISCOVERED and not getattr(settings, attr, "") and oidc_enabled():
        return discovery_document(settings.OIDC_ISSUER_URL)[DISCOVERED[attr]]
    return import_from_settings(attr, *args)


class LoginRefused(SuspiciousOperation):
    """The provider's answer did not prove who the person is; the message says why."""


class OIDCBackend(OIDCAuthenticationBackend):
    """Endpoints are looked up when a login needs them, not when the backend is built: Django
    builds it for every request of a signed-in person, and a provider that is down must not
    break pages (or password logins) for people already in."""

    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args, **kwargs):
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        self.OIDC_RP_CLIENT_SECRET = settings.OIDC_RP_CLIENT_SECRET
        self.OIDC_RP_SIGN_ALGO = settings.OIDC_RP_SIGN_ALGO
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.UserModel = get_user_model()

    OIDC_OP_TOKEN_ENDPOINT = property(lambda self: oidc_setting("OIDC_OP_TOKEN_ENDPOINT"))
    OIDC_OP_USER_ENDPOINT = property(lambda self: oidc_setting("OIDC_OP_USER_ENDPOINT"))
    OIDC_OP_JWKS_ENDPOINT = property(lambda self: oidc_setting("OIDC_OP_JWKS_ENDPOINT"))

    def _verify_jws(self, payload, key):
        """Signature, expiry, issuer and audience: mozilla-django-oidc checks only the first."""
        header = jwt.get_unverified_header(payload)
        if header.get("alg") != self.OIDC_RP_SIGN_ALGO:
            raise LoginRefused(f"The ID token is signed with {header.get('alg')!r}, not {self.OIDC_RP_SIGN_ALGO}.")
        try:
            return jwt.decode(payload, key, algorithms=[self.OIDC_RP_SIGN_ALGO], audience=self.OIDC_RP_CLIENT_ID,
                              issuer=settings.OIDC_ISSUER_URL, options={"require": ["exp", "iat", "sub"]},
                              leeway=settings.OIDC_CLOCK_LEEWAY_SECONDS)
        except jwt.ExpiredSignatureError:
            raise LoginRefused("The ID token has expired.") from None
        except jwt.InvalidSignatureError:
            raise LoginRefused("The ID token's signature does not verify: it was altered or not signed by the "
                               "provider.") from None
        except jwt.InvalidTokenError as exc:
            raise LoginRefused(f"The ID token was refused: {exc}.") from None

    def authenticate(self, request, **kwargs):
        try:
            return super().authenticate(request, **kwargs)
        except (SuspiciousOperation, requests.RequestException) as exc:
            log.warning("single sign-on refused: %s", exc)
            if request is not None:
                messages.error(request, f"Single sign-on failed: {exc}")
            return None

    def get_or_create_user(self, access_token, id_token, payload):
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if str(userinfo.get("sub")) != str(payload.get("sub")):
            raise LoginRefused("The userinfo answer is about another subject than the ID token.")
        # The signed ID token wins over the userinfo answer wherever both carry a claim.
        return sso_login_apply(claims=Claims.from_dict({**userinfo, **payload}, issuer=settings.OIDC_ISSUER_URL))


class OIDCLoginView(OIDCAuthenticationRequestView):
    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args, **kwargs):
        View.__init__(self, *args, **kwargs)
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID

    def get(self, request):
        try:
            self.OIDC_OP_AUTH_ENDPOINT = oidc_setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except (requests.RequestException, ValueError, ImproperlyConfigured) as exc:
            log.error("OIDC discovery failed: %s", exc)
            messages.error(request, "Single sign-on is unavailable: the identity provider did not answer.")
            return redirect("login")
        return super().get(request)


class OIDCCallbackView(OIDCAuthenticationCallbackView):
    get_settings = staticmethod(oidc_setting)
