"""The Kubernetes back-end: Nodes as inventory (a watch), cordons mirrored both ways, and Jobs
admitted the way Kueue does and bound where Fleetdeck placed them (a secondary scheduler)."""
