from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "fleet"
    verbose_name = "Fleet inventory"

    def ready(self) -> None:
        # Imported here, not at module top: models and services load only once the app registry is ready.
        from core.metrics import register_collector

        from .metrics import collect_inventory

        register_collector("fleet", collect_inventory)

