"""`manage.py kubernetes_watch`: the long-running process that keeps the inventory and the
workloads equal to the cluster (Nodes and queue-labelled Jobs), one watch window after the other."""
from __future__ import annotations

import threading

from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from integrations.kubernetes.client import KubernetesError, get_cluster
from integrations.kubernetes.inventory import conf
from integrations.kubernetes.sync import job_reflector, node_reflector


class Command(BaseCommand):
    help = "Watch the Kubernetes cluster's Nodes and queue-labelled Jobs (KUBERNETES_ENABLED must be on)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--window", type=float, default=300.0,
                            help="Seconds of one watch request before it is renewed (default 300).")
        parser.add_argument("--once", action="store_true", help="List and apply one window of events, then exit.")

    def handle(self, *args, window: float, once: bool, **options) -> None:
        if not conf("KUBERNETES_ENABLED", False):
            raise CommandError("FLEETDECK KUBERNETES_ENABLED is off")
        try:
            cluster = get_cluster()
        except KubernetesError as exc:
            raise CommandError(exc.message) from exc
        reflectors = [node_reflector(cluster),
                      job_reflector(cluster, workers=int(conf("KUBERNETES_JOB_IMPORT_WORKERS", 4)))]
        if once:
            for reflector in reflectors:
                reflector.run_for(min(window, 5.0))
                self.stdout.write(f"{reflector.path}: {reflector.lists} lists, {reflector.events} events")
            return
        # One thread per watch, so a burst of Job events never delays a Node going NotReady.
        threads = [threading.Thread(target=_forever, args=(r, window), name=r.path, daemon=True) for r in reflectors]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def _forever(reflector, window: float) -> None:
    while True:
        close_old_connections()
        reflector.run_for(window)
