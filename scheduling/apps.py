from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Scheduling"

    def ready(self) -> None:
        # Imported here, not at module top: models and services load only once the app registry is ready.
        from core.metrics import register_collector
        from core.roles import register_team_ids_source
        from fleet.hooks import register_allocations, register_flavor_uses
        from scheduling import executors  # noqa: F401 - registers the built-in executors

        from .metrics import collect_scheduling
        from .selectors import allocations_for_fleet, team_ids_of
        from .services.policy_delete import flavor_uses

        register_collector("scheduling", collect_scheduling)
        # Roles ask which teams a user belongs to; the inventory asks which GPUs hold allocations.
        register_team_ids_source(team_ids_of)
        register_allocations(allocations_for_fleet)
        # A flavor is not deleted while quotas, pod sets or quota requests use it.
        register_flavor_uses(flavor_uses)
