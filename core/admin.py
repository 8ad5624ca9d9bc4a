"""The audit log in the admin, and the base class that makes admin edits audited like any other change."""
from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import flatten_fieldsets
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.db import models

from .actors import Actor
from .audit import audit_record
from .models import AuditEvent, PersonalAccessToken

ADMIN_DELETE_REASON = "deleted in the admin"


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ("at", "actor", "verb", "target_repr", "reason")
    list_filter = ("verb", "target_type")
    search_fields = ("actor", "target_repr", "reason")
    readonly_fields = [f.name for f in AuditEvent._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(PersonalAccessToken)
class PersonalAccessTokenAdmin(admin.ModelAdmin):
    """Read-only: tokens are created and revoked by their owners (Tokens page, API), audited there."""

    list_display = ("name", "user", "prefix", "scopes", "created_at", "expires_at", "last_used_at", "revoked_at")
    search_fields = ("name", "prefix", "user__username")
    readonly_fields = [f.name for f in PersonalAccessToken._meta.fields if f.name != "key_hash"]
    exclude = ("key_hash",)

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


def _reason_field() -> forms.CharField:
    return forms.CharField(
        label="Reason for this change", max_length=500, strip=True,
        help_text="Recorded in the audit log with your name and the changed fields.",
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, models.Model):
        return value.pk
    if isinstance(value, models.QuerySet | list | tuple | set):
        return [_jsonable(v) for v in value]
    return value if isinstance(value, str | int | float | bool | dict | type(None)) else str(value)


def _changes(form: forms.ModelForm) -> tuple[dict[str, Any], dict[str, Any]]:
    """(before, after) of the model fields the form changed; `initial` holds the row as it was
    loaded. Form-only fields (a new user's password1/password2) and password hashes stay out."""
    model_fields = {f.name for f in form._meta.model._meta.get_fields()} - {"password"}
    names = [n for n in form.changed_data if n in form.cleaned_data and n in model_fields]
    before = {n: _jsonable(form.initial.get(n)) for n in names}
    after = {n: _jsonable(form.cleaned_data[n]) for n in names}
    return before, after


class AuditedAdminMixin:
    """Admin edits are state changes too: the change form asks for a reason, and every create,
    update and delete (its inlines' included) writes an AuditEvent inside the admin's transaction.
    The delete confirmation has no form, so deletions carry a fixed reason."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Declared on the admin's own form classes (UserAdmin has a second one for adding), so
        # modelform_factory accepts it in the fields and every form asks for it.
        for attr in ("form", "add_form"):
            if hasattr(self, attr):
                base = getattr(self, attr)
                setattr(self, attr, type(base.__name__, (base,), {"audit_reason": _reason_field()}))

    def get_fieldsets(self, request, obj=None):
        fieldsets = list(super().get_fieldsets(request, obj))
        if "audit_reason" not in flatten_fieldsets(fieldsets):
            fieldsets.append(("Why", {"fields": ("audit_reason",)}))
        return fieldsets

    def _verb(self, obj: models.Model, action: str) -> str:
        return f"{obj._meta.model_name}.admin_{action}"

    def save_model(self, request, obj, form, change) -> None:
        before, after = _changes(form)
        super().save_model(request, obj, form, change)
        if change and not after:
            return
        audit_record(actor=Actor.for_user(request.user), verb=self._verb(obj, "change" if change else "add"),
                     target=obj, reason=form.cleaned_data["audit_reason"], before=before if change else {},
                     after=after)

    def save_formset(self, request, form, formset, change) -> None:
        actor, reason = Actor.for_user(request.user), form.cleaned_data["audit_reason"]
        for inline in formset.deleted_forms:
            if inline.instance.pk is not None:
                audit_record(actor=actor, verb=self._verb(inline.instance, "delete"), target=inline.instance,
                             reason=reason, before={"repr": str(inline.instance)})
        changed = [(inline, inline.instance._state.adding, *_changes(inline)) for inline in formset.forms
                   if inline.has_changed() and inline not in formset.deleted_forms]
        super().save_formset(request, form, formset, change)
        for inline, added, before, after in changed:
            audit_record(actor=actor, verb=self._verb(inline.instance, "add" if added else "change"),
                         target=inline.instance, reason=reason, before={} if added else before, after=after)

    def delete_model(self, request, obj) -> None:
        audit_record(actor=Actor.for_user(request.user), verb=self._verb(obj, "delete"), target=obj,
                     reason=ADMIN_DELETE_REASON, before={"repr": str(obj)})
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset) -> None:
        actor = Actor.for_user(request.user)
        for obj in queryset:
            audit_record(actor=actor, verb=self._verb(obj, "delete"), target=obj, reason=ADMIN_DELETE_REASON,
                         before={"repr": str(obj)})
        super().delete_queryset(request, queryset)


class AuditedModelAdmin(AuditedAdminMixin, admin.ModelAdmin):
    pass


# Roles are group memberships: who made whom an operator, and why, belongs in the audit log too.
admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(User)
class AuditedUserAdmin(AuditedAdminMixin, UserAdmin):
    pass


@admin.register(Group)
class AuditedGroupAdmin(AuditedAdminMixin, GroupAdmin):
    pass
