"""Executors' cluster back-ends: where Fleetdeck's inventory and placements meet a real scheduler."""
