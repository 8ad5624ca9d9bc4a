from django.core.management.base import BaseCommand

from core.actors import Actor
from scheduling.priority_classes import priority_classes_seed


class Command(BaseCommand):
    help = "Create the default priority classes (inference-online, training-prod, research-batch, opportunistic)."

    def handle(self, *args, **options):
        created = priority_classes_seed(actor=Actor.automation("seed_priority_classes"))
        names = ", ".join(pc.name for pc in created) or "none (all exist)"
        self.stdout.write(f"Priority classes created: {names}")
