"""Register Fleetdeck as a confidential RS256 client allowed one redirect URI, consent skipped."""
from django.core.management.base import BaseCommand
from oauth2_provider.models import Application


class Command(BaseCommand):
    def add_arguments(self, parser):
        parser.add_argument("--client-id", required=True)
        parser.add_argument("--client-secret", required=True)
        parser.add_argument("--redirect-uri", required=True)

    def handle(self, *args, client_id, client_secret, redirect_uri, **options):
        Application.objects.update_or_create(client_id=client_id, defaults={
            "name": "Fleetdeck", "client_secret": client_secret, "redirect_uris": redirect_uri,
            "client_type": Application.CLIENT_CONFIDENTIAL,
            "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
            "algorithm": Application.RS256_ALGORITHM, "skip_authorization": True,
        })
