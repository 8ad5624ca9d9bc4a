"""The operator's pages that compose fleet, scheduling and health: the fleet overview and the node page."""
