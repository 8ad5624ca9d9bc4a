"""The login page (password and single sign-on) and the Tokens page: a person's API tokens,
created (the key shown once) and revoked."""
from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from core.actors import Actor
from core.models import PersonalAccessToken
from core.tokens import token_create, token_revoke, tokens_of

from .forms import TokenCreateForm
from .oidc import oidc_enabled


def _render_tokens(request: HttpRequest, form: TokenCreateForm, *, new_key: str = "", status: int = 200):
    context = {"tokens": tokens_of(request.user), "form": form, "new_key": new_key, "now": timezone.now()}
    return render(request, "accounts/tokens.html", context, status=status)


@require_http_methods(["GET", "POST"])
def tokens_page(request: HttpRequest) -> HttpResponse:
    if request.method == "GET":
        return _render_tokens(request, TokenCreateForm())
    form = TokenCreateForm(request.POST)
    if not form.is_valid():
        return _render_tokens(request, form, status=400)
    try:
        _, key = token_create(user=request.user, name=form.cleaned_data["name"],
                              days=form.cleaned_data["expires_in_days"], scopes=form.cleaned_data["scopes"],
                              actor=Actor.for_user(request.user))
    except ValidationError as exc:
        for field, errors in exc.message_dict.items():
            form.add_error(field if field in form.fields else None, errors)
        return _render_tokens(request, form, status=400)
    # Rendered, not redirected: the key exists in clear only in this answer.
    return _render_tokens(request, TokenCreateForm(), new_key=key)


@require_POST
def token_revoke_view(request: HttpRequest, token_id: int) -> HttpResponse:
    token = PersonalAccessToken.objects.filter(pk=token_id, user=request.user).first()
    if token is None:
        raise Http404("No such token of yours.")
    token_revoke(token=token, actor=Actor.for_user(request.user))
    messages.success(request, f"Token {token} revoked.")
    return redirect("accounts:tokens")


class LoginView(auth_views.LoginView):
    """The password form next to "Log in with single sign-on"; OIDC_ONLY=true keeps only the latter."""

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), "sso_enabled": oidc_enabled(),
                "password_login": not settings.OIDC_ONLY}

    def post(self, request, *args, **kwargs):
        if settings.OIDC_ONLY:
            return HttpResponseForbidden("Password login is turned off (OIDC_ONLY=true): log in with single sign-on.",
                                         content_type="text/plain")
        return super().post(request, *args, **kwargs)
