"""Workload lists say what a MIG or fractional workload asks for ("1 × 3g.40gb MIG",
"0.5 GPU (shared)"), not a GPU count that read 0 for them; whole-GPU gangs keep their count."""
from __future__ import annotations

import re

import pytest
from django.test import Client

from scheduling.models import PodSet, PriorityClass, Queue, Workload

pytestmark = pytest.mark.django_db


@pytest.fixture
def mixed(team):
    queue = Queue.objects.create(name="mixed-q", team=team)
    prio = PriorityClass.objects.create(name="batch", value=100)

    def workload(name, state, **pod_set):
        w = Workload.objects.create(name=name, team=team, queue=queue, priority_class=prio, state=state)
        PodSet.objects.create(workload=w, name="main", **pod_set)
        return w

    return {
        "mig": workload("mig-eval", "pending", replicas=1, gpus_per_replica=0, mig_profile="3g.40gb"),
        "share": workload("notebook", "pending", replicas=1, gpus_per_replica=0, milli_gpu=500),
        "gang": workload("train", "running", replicas=2, gpus_per_replica=8),
    }


def gpus_cell(body: str, name: str) -> str:
    """The GPUs cell of the row that links or names `name`."""
    row = next(r for r in re.findall(r"<tr[^>]*>.*?</tr>", body, re.S) if f">{name}<" in r)
    return re.search(r'<td class="gpus-asked"[^>]*>(.*?)</td>', row, re.S).group(1)


def test_the_workloads_list_names_mig_slices_and_shares(mixed, viewer):
    client = Client()
    client.force_login(viewer)
    body = client.get("/scheduling/workloads/").content.decode()
    assert gpus_cell(body, "mig-eval") == "1 × 3g.40gb MIG"
    assert gpus_cell(body, "notebook") == "0.5 GPU (shared)"
    assert gpus_cell(body, "train") == "16 GPUs (2 × 8)"
    assert 'title="Counts 1 against quota">0.5 GPU (shared)' in body


def test_the_queues_and_team_pages_say_the_same(mixed, team_member, team):
    client = Client()
    client.force_login(team_member)
    queues = client.get("/scheduling/queues/").content.decode()
    assert gpus_cell(queues, "mig-eval") == "1 × 3g.40gb MIG"
    assert gpus_cell(queues, "notebook") == "0.5 GPU (shared)"
    team_page = client.get(f"/scheduling/teams/{team.pk}/").content.decode()
    assert gpus_cell(team_page, "mig-eval") == "1 × 3g.40gb MIG"
    assert gpus_cell(team_page, "train") == "16 GPUs (2 × 8)"
