"""The two watches that keep Fleetdeck equal to a cluster: Nodes (inventory, readiness, cordons)
and queue-labelled Jobs (workloads). See watch.Reflector for list + watch; inventory.py and
job_imports.py for what each event does."""
from __future__ import annotations

from dataclasses import replace

from .client import Cluster, WatchEvent
from .inventory import SYNC_ACTOR, conf, node_apply, node_remove, nodes_reconcile, same_inventory
from .job_imports import JOB_SELECTOR, JOBS_PATH, jobs_events, jobs_list
from .nodes import NodeFacts, node_facts
from .watch import Reflector

NODES_PATH = "/api/v1/nodes"


def node_reflector(cluster: Cluster | None = None) -> Reflector:
    # What this watch last applied of each Node, without its resourceVersion: an update that
    # changes nothing Fleetdeck reads (a kubelet's status heartbeat, a condition's timestamps, an
    # annotation it does not mirror is still read, so it counts) costs no database work. A list
    # starts it afresh.
    applied: dict[str, NodeFacts] = {}

    def on_list(items: list[dict]) -> None:
        applied.clear()
        facts = [node_facts(item) for item in items]
        nodes_reconcile(nodes=facts, actor=SYNC_ACTOR, complete=True)
        applied.update((f.name, replace(f, resource_version="")) for f in facts)

    def on_event(event: WatchEvent) -> None:
        if event.type == "DELETED":
            applied.pop(event.object["metadata"]["name"], None)
            node_remove(name=event.object["metadata"]["name"], actor=SYNC_ACTOR)
            return
        facts = node_facts(event.object)
        same = replace(facts, resource_version="")
        before = applied.pop(facts.name, None)
        if before == same:
            applied[facts.name] = same
            return
        node_apply(facts=facts, actor=SYNC_ACTOR, inventory_applied=before is not None and same_inventory(before, same))
        applied[facts.name] = same

    return Reflector(path=NODES_PATH, label_selector=str(conf("KUBERNETES_NODE_SELECTOR", "")), on_list=on_list,
                     on_event=on_event, cluster=cluster)


def job_reflector(cluster: Cluster | None = None, *, workers: int = 1) -> Reflector:
    """`workers` > 1 imports on that many lanes at once, each taking the Jobs queued on it as one
    batch (the watch process uses KUBERNETES_JOB_IMPORT_WORKERS); each lane has a database
    connection of its own."""
    reflector = Reflector(path=JOBS_PATH, label_selector=JOB_SELECTOR, on_list=lambda items: None,
                          on_event=lambda event: jobs_events([event], cluster),
                          on_events=lambda events: jobs_events(events, cluster), cluster=cluster, workers=workers)
    # A relist (the first, or after 410 Gone) imports its Jobs on the events' lanes, in batches.
    reflector.on_list = lambda items: jobs_list(items, cluster, batches=reflector.batches)
    return reflector
