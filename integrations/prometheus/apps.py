from django.apps import AppConfig
from django.conf import settings


class PrometheusConfig(AppConfig):
    name = "integrations.prometheus"
    label = "prometheus"
    verbose_name = "Prometheus and Alertmanager"

    def ready(self) -> None:
        # Start-up cycle: the modules below import models, which are not ready before ready().
        from core.metrics import register_collector
        from health.telemetry import register_telemetry_source

        from . import alerts_out, metrics
        from .client import PrometheusClient
        from .source import PrometheusTelemetry

        if settings.FLEETDECK.get("PROMETHEUS_URL"):
            # Pages read utilisation and its history from Prometheus; Fleetdeck keeps no minute rows.
            register_telemetry_source(PrometheusTelemetry(PrometheusClient.from_settings()))
            # What each GPU's allocation is, for the recording rules that join teams to the GPUs' series.
            register_collector("prometheus", metrics.collect)
        # Automation's cordons, tickets, failed burn-ins and stopped gangs go to Alertmanager when set.
        alerts_out.connect()
