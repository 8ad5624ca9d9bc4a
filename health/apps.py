from django.apps import AppConfig


class HealthConfig(AppConfig):
    name = "health"
    verbose_name = "Health"

    def ready(self) -> None:
        # Imported here, not at module top: models and services load only once the app registry is ready.
        from core.metrics import register_collector
        from fleet.hooks import register_uncordon_gate
        from scheduling.quota_requests.selectors import register_utilised_history
        from scheduling.quota_requests.services import register_utilisation_source
        from scheduling.selectors import register_failure_source

        from .metrics import collect
        from .selectors import gpu_failures_since
        from .services.tickets import uncordon_check
        from .telemetry import utilised_by_queue_flavor, utilised_history

        register_collector("health", collect)
        # Quota-request usage samples record how busy allocated GPUs really were (SM activity), from
        # whichever telemetry source is registered (health.telemetry).
        register_utilisation_source(utilised_by_queue_flavor)
        # Team pages' charts take their utilised line from a source that keeps the history itself.
        register_utilised_history(utilised_history)
        # Checkpoint advice derives its MTBF from the fleet's real failure history.
        register_failure_source(gpu_failures_since)
        # A node with an unfinished repair ticket is uncordoned only with an audited override.
        register_uncordon_gate(uncordon_check)
