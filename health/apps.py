from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "health"
    verbose_name = "Health"

    def ready(self) -> None:
        from core.metrics import register_collector

        from .metrics import collect

        register_collector("health", collect)
