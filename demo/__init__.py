"""The demo: a simulated fleet with its teams, workloads and quota requests (load_demo), simulated
DCGM telemetry, and the all-in-one launcher (rundemo). Never part of a real installation's data path."""
