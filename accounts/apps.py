from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """People: single sign-on (OIDC) with group → role/team mapping, and personal access tokens."""

    name = "accounts"
    verbose_name = "Accounts"
