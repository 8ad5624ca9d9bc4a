from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling"

    def ready(self) -> None:
        from core.metrics import register_collector
        from scheduling import executors  # noqa: F401 - registers the built-in executors

        from .metrics import collect_scheduling

        register_collector("scheduling", collect_scheduling)
