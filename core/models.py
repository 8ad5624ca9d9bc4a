"""Cross-cutting records: the audit log."""
from django.conf import settings
from django.db import models


class AuditEventQuerySet(models.QuerySet):
    def for_target(self, obj: models.Model) -> "AuditEventQuerySet":
        return self.filter(target_type=obj._meta.label_lower, target_id=str(obj.pk))


class AuditEvent(models.Model):
    """Who (a user, a user through an API token, a node agent or an automation) changed what, when and why."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor = models.CharField(
        max_length=150, help_text="e.g. 'alice', 'alice (token fdp_Ab12Cd34…)', 'automation:health'"
    )
    verb = models.CharField(max_length=80, db_index=True, help_text="e.g. node.cordon")
    target_type = models.CharField(max_length=80)
    target_id = models.CharField(max_length=64)
    target_repr = models.CharField(max_length=200)
    reason = models.TextField(blank=True)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["target_type", "target_id", "-at"], name="core_audit_target_idx")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.verb} {self.target_repr}"


class TokenScope(models.TextChoices):
    """What a personal access token may do. A token with no scopes acts with all its owner's rights."""

    READ = "read", "Read only"
    SUBMIT = "submit", "Submit and cancel for my teams"
    OPERATE = "operate", "Operator actions"


class PersonalAccessTokenQuerySet(models.QuerySet):
    def usable(self, now) -> "PersonalAccessTokenQuerySet":
        return self.filter(revoked_at__isnull=True, expires_at__gt=now)


class PersonalAccessToken(models.Model):
    """A person's API credential. Only the SHA-256 of the secret is stored; the prefix (the key's
    first characters) is what pages and the audit log show to tell tokens apart."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, db_index=True)
    key_hash = models.CharField(max_length=64, unique=True)
    scopes = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = PersonalAccessTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"
