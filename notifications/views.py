"""A person's notification settings, with the log of what was sent to them (and why not)."""
from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from core.roles import is_operator

from .choices import DELIVERY_STATE_COLORS
from .forms import NotificationSettingsForm
from .models import NotificationSettings
from .services import deliveries_of, settings_save


@require_http_methods(["GET", "POST"])
def settings_page(request: HttpRequest) -> HttpResponse:
    current = NotificationSettings.objects.filter(user=request.user).first() or NotificationSettings(
        user=request.user)
    form = NotificationSettingsForm(request.POST or None, instance=current, operator=is_operator(request.user))
    if request.method == "POST":
        if form.is_valid():
            settings_save(user=request.user, values=form.cleaned_data)
            messages.success(request, "Notification settings saved.")
            return redirect("notifications:settings")
    context = {"form": form, "deliveries": deliveries_of(request.user), "state_colors": DELIVERY_STATE_COLORS,
               "email": request.user.email}
    return render(request, "notifications/settings.html", context, status=400 if form.errors else 200)
