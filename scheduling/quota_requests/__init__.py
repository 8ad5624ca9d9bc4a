"""Team quota pages, quota requests and their review, usage sampling and sizing signals."""
