"""Create or update a provider user (password "pw-<name>") and set exactly these groups."""
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("groups", nargs="*")
        parser.add_argument("--email", default="")

    def handle(self, *args, username, groups, email, **options):
        user, created = User.objects.get_or_create(username=username)
        if created:
            user.set_password(f"pw-{username}")
        user.email = email or f"{username}@example.com"
        user.first_name = username.capitalize()
        user.save()
        user.groups.set([Group.objects.get_or_create(name=name)[0] for name in groups])
