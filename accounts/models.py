"""Who a person is at the organisation's identity provider."""
from django.conf import settings
from django.db import models


class OidcIdentity(models.Model):
    """Links a Fleetdeck user to an OIDC subject: the issuer's stable id for the person, which
    survives a changed e-mail address or user name."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identity")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_groups = models.JSONField(default=list, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="%(app_label)s_%(class)s_unique_subject")
        ]

    def __str__(self) -> str:
        return f"{self.user} at {self.issuer}"
