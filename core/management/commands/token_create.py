"""Issue a personal access token for a user, printed once: for scripts and CI set-up."""
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from core.actors import Actor
from core.models import TokenScope
from core.tokens import DEFAULT_DAYS, MAX_DAYS, token_create


class Command(BaseCommand):
    help = "Create a personal access token for USERNAME and print its key (shown only this once)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="command line", help="what the token is for")
        parser.add_argument("--days", type=int, default=DEFAULT_DAYS, help=f"days until it expires (1-{MAX_DAYS})")
        parser.add_argument("--scope", action="append", choices=TokenScope.values, default=[], dest="scopes",
                            help="repeat for several; none: all of the user's rights")

    def handle(self, *args, username: str, name: str, days: int, scopes: list[str], **options) -> None:
        try:
            user = get_user_model().objects.get(username=username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"No user named {username!r}.") from None
        try:
            token, key = token_create(user=user, name=name, days=days, scopes=scopes,
                                      actor=Actor.automation("token_create command"))
        except ValidationError as exc:
            raise CommandError("; ".join(f"{f}: {' '.join(m)}" for f, m in exc.message_dict.items())) from None
        self.stderr.write(f"Token {token.prefix}… for {username}, expires {token.expires_at:%Y-%m-%d}; "
                          "send it as 'Authorization: Token <key>':")
        self.stdout.write(key)
