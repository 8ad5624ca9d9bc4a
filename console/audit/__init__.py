"""The audit log as a page and an API: filtered, linked to the objects, exported as CSV, and
limited to what the reader may see."""
