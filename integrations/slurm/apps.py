from django.apps import AppConfig


class SlurmConfig(AppConfig):
    name = "integrations.slurm"
    label = "slurm"
    verbose_name = "Slurm back-end"

    def ready(self) -> None:
        # Imported here, not at module top: models and services load only once the app registry is ready.
        # Mirror cordons into Slurm and run gangs placed on Slurm nodes.
        from scheduling.executors import register_executor

        from . import signals
        from .executor import SlurmExecutor

        signals.connect()
        register_executor("slurm", SlurmExecutor)
