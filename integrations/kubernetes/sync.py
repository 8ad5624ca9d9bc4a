"""The two watches that keep Fleetdeck equal to a cluster: Nodes (inventory, readiness, cordons)
and queue-labelled Jobs (workloads). See watch.Reflector for list + watch; inventory.py and
job_imports.py for what each event does."""
from __future__ import annotations

from .client import Cluster, WatchEvent
from .inventory import SYNC_ACTOR, conf, node_apply, node_remove, nodes_reconcile
from .job_imports import JOB_SELECTOR, JOBS_PATH, jobs_event, jobs_list
from .nodes import node_facts
from .watch import Reflector

NODES_PATH = "/api/v1/nodes"


def node_reflector(cluster: Cluster | None = None) -> Reflector:
    def on_list(items: list[dict]) -> None:
        nodes_reconcile(nodes=[node_facts(item) for item in items], actor=SYNC_ACTOR, complete=True)

    def on_event(event: WatchEvent) -> None:
        if event.type == "DELETED":
            node_remove(name=event.object["metadata"]["name"], actor=SYNC_ACTOR)
        else:
            node_apply(facts=node_facts(event.object), actor=SYNC_ACTOR)

    return Reflector(path=NODES_PATH, label_selector=str(conf("KUBERNETES_NODE_SELECTOR", "")), on_list=on_list,
                     on_event=on_event, cluster=cluster)


def job_reflector(cluster: Cluster | None = None) -> Reflector:
    return Reflector(path=JOBS_PATH, label_selector=JOB_SELECTOR, on_list=lambda items: jobs_list(items, cluster),
                     on_event=lambda event: jobs_event(event, cluster), cluster=cluster)
