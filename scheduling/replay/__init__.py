"""Trace replay: the FGD paper's GPU-sharing experiment on our placement policies.

Pure Python (no Django): `trace` loads the openb CSVs and arrival sequences, `cluster` is
the simulated fleet, `policies` the placement policies, `simulate` runs one replay and
computes the paper's metric, `report` writes placements, tables and charts."""
