"""python manage.py issue_node_token NODE: create or rotate the node's agent token, print it once."""
from __future__ import annotations

from django.core.management.base import BaseCommand

from core.actors import Actor
from fleet.agent_tokens import node_token_rotate

from ._common import node_named


class Command(BaseCommand):
    help = "Issue (or rotate) a node's agent token; the token is printed once and only its hash is kept."

    def add_arguments(self, parser):
        parser.add_argument("node")

    def handle(self, *args, **options):
        node = node_named(options["node"])
        self.stdout.write(node_token_rotate(node=node, actor=Actor.automation("issue_node_token")))
