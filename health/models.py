"""Health events, repair tickets and GPU readings."""
