from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "fleet"
    verbose_name = "Fleet inventory"

    def ready(self) -> None:
        from core.metrics import register_collector

        from .metrics import collect_inventory

        register_collector("fleet", collect_inventory)

