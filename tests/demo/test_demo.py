"""load_demo: the seed's worked example plus A100 and L40S pools, people, teams and policies."""
from __future__ import annotations

import pytest
from django.contrib.auth import authenticate
from django.core.management import call_command

from core.models import AuditEvent
from core.roles import role_of
from demo.fleet import DEMO_LOGINS, demo_fleet
from fleet.importer import validate_fleet
from fleet.models import Gpu, Node, Rack
from scheduling.models import PriorityClass, Queue, QueueQuota

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(capsys):
    call_command("load_demo")
    return capsys.readouterr().out


def snapshot() -> list:
    return [
        list(Node.objects.values()),
        list(Gpu.objects.order_by("uuid").values()),
        list(QueueQuota.objects.values()),
        list(PriorityClass.objects.values()),
        AuditEvent.objects.count(),
    ]


def test_the_demo_fleet_is_a_valid_import_document():
    assert validate_fleet(demo_fleet()) == []


def test_the_h100_pool_is_the_worked_example(demo):
    h100 = Gpu.objects.filter(node__pool="h100")
    assert h100.count() == 64
    assert set(h100.values_list("product", "memory_mib", "node__flavor__name")) == {
        ("NVIDIA H100 80GB HBM3", 81559, "H100-SXM-80GB")}
    racks = {rack: sorted(Node.objects.filter(pool="h100", rack__name=rack).values_list("name", flat=True))
             for rack in ("r1", "r2")}
    assert racks == {"r1": ["n1", "n2", "n3", "n4"], "r2": ["n5", "n6", "n7", "n8"]}
    assert set(Rack.objects.filter(name__in=["r1", "r2"]).values_list("spine__name", flat=True)) == {"s1"}
    n1 = list(Gpu.objects.filter(node__name="n1").order_by("index"))
    assert [g.pci_bus_id for g in n1] == [
        "0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
        "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
    assert [g.numa_node for g in n1] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {g.nvlink_group for g in n1} == {0}


def test_the_other_pools_have_mig_and_time_slicing(demo):
    assert Gpu.objects.filter(node__pool="a100").count() == 32
    assert set(Node.objects.filter(pool="a100").values_list("rack__name", flat=True)) == {"r3"}
    mig = Gpu.objects.filter(mig_enabled=True).order_by("node__name", "index")
    assert [(g.node.name, g.index, len(g.mig_instances)) for g in mig] == [
        ("a3", 0, 2), ("a3", 1, 2), ("a4", 0, 7), ("a4", 1, 7)]
    l40s = Gpu.objects.filter(node__pool="l40s")
    assert l40s.count() == 16
    assert set(l40s.values_list("node__flavor__name", "sharing_mode", "sharing_replicas")) == {
        ("L40S-48GB", "time_slicing", 4)}


def test_the_demo_logins_work_with_their_roles(demo):
    for login in DEMO_LOGINS:
        user = authenticate(username=login.username, password=login.password)
        assert user is not None, login.username
        assert role_of(user) == login.role
        if login.team:
            assert list(user.team_memberships.values_list("team__name", flat=True)) == [login.team]
        assert login.username in demo and login.password in demo


def test_the_demo_operator_reads_the_audit_log_in_the_admin_and_may_not_edit_it(demo, client):
    assert client.login(username="ops", password="ops-demo")
    body = client.get("/admin/core/auditevent/").content.decode()
    assert "node.create" in body and "automation:demo" in body
    assert client.get("/admin/fleet/node/").status_code == 403
    assert 'href="/admin/"' in client.get("/").content.decode()
    client.logout()
    assert client.login(username="viewer", password="viewer-demo")
    assert client.get("/admin/core/auditevent/").status_code == 302
    assert 'href="/admin/"' not in client.get("/").content.decode()


def test_teams_queues_quotas_and_priority_classes(demo):
    assert list(Queue.objects.values_list("name", "team__name", "cohort__name")) == [
        ("evaluation-q", "evaluation", "main"), ("inference-q", "inference", "main"),
        ("research-q", "research", "main")]
    h100 = dict(QueueQuota.objects.filter(flavor__name="H100-SXM-80GB").values_list("queue__name", "nominal"))
    # evaluation starts with 8 and gives 4 back through an applied quota request
    # (demo/quota_requests.py), so research's open request can be approved cleanly.
    assert h100 == {"research-q": 48, "inference-q": 8, "evaluation-q": 4}
    assert not QueueQuota.objects.filter(borrowing_limit__isnull=True).exists()
    classes = list(PriorityClass.objects.values_list(
        "name", "value", "preemptible", "may_preempt", "grace_seconds", "min_runtime_seconds"))
    assert classes == [
        ("inference-online", 1000, False, True, 60, 600),
        ("training-prod", 500, False, False, 60, 600),
        ("research-batch", 100, True, False, 60, 600),
        ("opportunistic", -10, True, False, 60, 600),
    ]


def test_loading_twice_changes_nothing(demo, capsys):
    before = snapshot()
    call_command("load_demo")
    out = capsys.readouterr().out
    assert "Fleet: 0 created, 0 updated" in out and "Other demo objects created: 0" in out
    assert snapshot() == before
