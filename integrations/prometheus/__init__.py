"""Prometheus (and what speaks its HTTP API: Thanos, Mimir, VictoriaMetrics) as the telemetry source,
Alertmanager as the router of alerts. Switched on by PROMETHEUS_URL / ALERTMANAGER_URL."""
