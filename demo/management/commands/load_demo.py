"""python manage.py load_demo: the demo fleet, people, teams, queues, quotas and priority classes."""
from django.core.management.base import BaseCommand

from demo.fleet import DEMO_LOGINS, demo_load
from demo.quota_requests import load as quota_demo_load
from demo.workloads import load as workloads_demo_load


class Command(BaseCommand):
    help = "Load the demo data (idempotent: loading again changes nothing)."

    def handle(self, *args, **options):
        result = demo_load()
        fleet = result.fleet
        self.stdout.write(
            f"Fleet: {fleet.created} created, {fleet.updated} updated, {fleet.unchanged} unchanged, "
            f"{fleet.removed} removed"
        )
        self.stdout.write(f"Other demo objects created: {len(result.created)}")

        quotas = quota_demo_load()
        self.stdout.write(quotas.summary())

        self.stdout.write(workloads_demo_load().summary())
        self.stdout.write("Demo logins:")
        for login in DEMO_LOGINS:
            team = f" ({login.team})" if login.team else ""
            self.stdout.write(f"  {login.username:<8} {login.password:<12} {login.role}{team}")
