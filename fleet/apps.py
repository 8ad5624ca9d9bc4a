from django.apps import AppConfig


class FleetConfig(AppConfig):
    name = "fleet"
    verbose_name = "Fleet inventory"

    def ready(self) -> None:
        from core.metrics import register_collector

        from .metrics import collect_inventory

        register_collector("fleet", collect_inventory)

        # Slurm back-end: mirror cordons into Slurm, run gangs placed on Slurm nodes.
        from scheduling.executors import register_executor

        from .backends.slurm import signals as slurm_signals
        from .backends.slurm.executor import SlurmExecutor

        slurm_signals.connect()
        register_executor("slurm", SlurmExecutor)
