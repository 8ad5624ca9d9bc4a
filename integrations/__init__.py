"""Cluster back-ends and telemetry sources: where Fleetdeck meets the systems a fleet already runs.

Each backend is a Django app of its own (`integrations.<name>`) that plugs into fleet, scheduling
and health through their hooks from its AppConfig.ready(); no domain app imports an integration."""
