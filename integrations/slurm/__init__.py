"""Slurm back-end: inventory sync, drain/resume of cordoned nodes, and the Slurm executor.

parsers.py is pure (no Django); cli.py runs the Slurm commands; sync.py, signals.py, tasks.py
and executor.py tie them to the models."""
