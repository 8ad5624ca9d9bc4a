"""Every write of the health app. Views, API views, tasks and commands call these only.

For other parts:
- dcgm_ingest(*, node, text, actor, dry_run, now) -> DcgmOutcome
- dcgm_ingest_many(items: [(node, text)], *, now, actor) -> [DcgmOutcome | Exception] (a scrape's batch)
- dcgm_ingest_batches(batches, *, now, actor) -> iterator of dcgm_ingest_many's results (a scrape; the next batch
  parsed while one is stored)
- kernel_log_ingest(*, node, lines, actor, dry_run, now) -> KernelLogOutcome
- app_fault(*, workload, kind, nodes, actor, now) -> SignalOutcome
- agent_register(*, node, payload, now) / agent_heartbeat(*, node, payload, burn_in, now)
- gpu_mark_healthy(*, gpu, reason, actor): an operator returns a GPU (a passing burn-in returns its GPUs itself)
- ticket_open / ticket_transition / burn_in_record; uncordon_check (the uncordon gate health registers in fleet.hooks)
- condition_record / condition_resolve: repeating conditions (a node Slurm reports DOWN, a failing scrape)
- events_resolve(*, dedup_keys, now): events their source reports over (a resolved Alertmanager alert)
- nodes_mark_stale, workloads_watchdog, exporters_scrape, readings_prune (beat tasks)"""

from .agent import HeartbeatOutcome, NotRegistered, agent_heartbeat, agent_register, burn_in_from_body
from .dcgm import DcgmOutcome, dcgm_ingest, dcgm_ingest_batches, dcgm_ingest_many
from .events import HEALTH_ACTOR, SignalOutcome, condition_record, condition_resolve, events_resolve, signals_apply
from .faults import FAULT_KINDS, app_fault
from .kernel_log import KernelLogOutcome, kernel_log_ingest
from .liveness import node_seen, nodes_mark_stale
from .readings import ReadingRow, readings_prune, readings_store
from .recovery import gpu_mark_healthy
from .remediation import actions_execute
from .scrape import ScrapeOutcome, exporters_scrape
from .tickets import (
    TicketConflict,
    burn_in_record,
    ticket_open,
    ticket_transition,
    uncordon_check,
    unfinished_ticket,
)
from .watchdog import WatchdogOutcome, workloads_watchdog

__all__ = [
    "FAULT_KINDS",
    "HEALTH_ACTOR",
    "DcgmOutcome",
    "HeartbeatOutcome",
    "KernelLogOutcome",
    "NotRegistered",
    "ReadingRow",
    "ScrapeOutcome",
    "SignalOutcome",
    "TicketConflict",
    "WatchdogOutcome",
    "actions_execute",
    "agent_heartbeat",
    "agent_register",
    "app_fault",
    "burn_in_from_body",
    "burn_in_record",
    "condition_record",
    "condition_resolve",
    "dcgm_ingest",
    "dcgm_ingest_batches",
    "dcgm_ingest_many",
    "events_resolve",
    "exporters_scrape",
    "gpu_mark_healthy",
    "kernel_log_ingest",
    "node_seen",
    "nodes_mark_stale",
    "readings_prune",
    "readings_store",
    "signals_apply",
    "ticket_open",
    "ticket_transition",
    "uncordon_check",
    "unfinished_ticket",
    "workloads_watchdog",
]
