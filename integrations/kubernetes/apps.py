from django.apps import AppConfig


class KubernetesConfig(AppConfig):
    name = "integrations.kubernetes"
    label = "kubernetes"
    verbose_name = "Kubernetes back-end"

    def ready(self) -> None:
        # Mirror cordons onto Nodes and run gangs placed on Kubernetes nodes as Jobs.
        # Imported here, not at module top: they import models, which are not ready at import time.
        from scheduling.executors import register_executor

        from . import signals
        from .executor import KubernetesExecutor

        signals.connect()
        register_executor("kubernetes", KubernetesExecutor)
