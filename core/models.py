"""Cross-cutting records: the audit log."""
from django.conf import settings
from django.db import models


class AuditEventQuerySet(models.QuerySet):
    def for_target(self, obj: models.Model) -> "AuditEventQuerySet":
        return self.filter(target_type=obj._meta.label_lower, target_id=str(obj.pk))


class AuditEvent(models.Model):
    """Who (a user, an API token or an automation) changed what, when and why."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor = models.CharField(max_length=150, help_text="e.g. 'alice', 'alice (API token)', 'automation:health'")
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
