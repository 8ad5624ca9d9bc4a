"""Sentences about tickets and failures read as English: "Ticket #3 is open, so it cannot move to
returned" (was "A open ticket cannot move…"), "1 failure over 64 GPUs" (was "1 failures")."""
from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.utils import timezone

from fleet.models import Gpu, Node
from health.services import ticket_open
from scheduling.models import PodSet, PriorityClass, Queue, Workload

from .test_loops import OPS


def test_a_refused_ticket_move_names_the_ticket_and_its_state(cluster, operator):
    ticket, _ = ticket_open(node=Node.objects.get(name="n3"), evidence="Xid 79", actor=OPS)
    client = Client()
    client.force_login(operator)
    refused = client.post(f"/health/tickets/{ticket.pk}/transition/", {"to": "returned", "reason": "trust me"})
    body = refused.content.decode()
    assert refused.status_code in (400, 409)
    assert f"Ticket #{ticket.pk} is open, so it cannot move to returned; allowed: diagnosing." in body
    assert "A open" not in body


def test_checkpoint_advice_counts_one_failure_and_one_gpu_in_the_singular(cluster, team, viewer):
    Gpu.objects.update(first_seen_at=timezone.now() - timedelta(days=365))
    ticket_open(node=Node.objects.get(name="n1"), evidence="Xid 79", actor=OPS)
    queue = Queue.objects.create(name="solo-q", team=team)
    prio = PriorityClass.objects.create(name="batch", value=100)
    solo = Workload.objects.create(name="solo", team=team, queue=queue, priority_class=prio,
                                   checkpoint_enabled=True, checkpoint_write_seconds=120)
    PodSet.objects.create(workload=solo, name="main", replicas=1, gpus_per_replica=1)
    client = Client()
    client.force_login(viewer)
    body = client.get(f"/scheduling/workloads/{solo.pk}/").content.decode()
    assert "(1 failure over 138,240 observed GPU-hours in the last 90 days)" in body
    assert "(the fleet&#x27;s per-GPU MTBF over 1 GPU)" in body
    assert "1 failures" not in body and "1 GPUs" not in body
