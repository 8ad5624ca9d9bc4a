"""The scheduling admin: quota and team edits are audited with a reason; workload records,
allocations and quota requests are read-only there (only the services may change them)."""
from __future__ import annotations

import pytest
from django.test import Client

from core.models import AuditEvent
from fleet.models import GpuFlavor
from scheduling.models import Queue, QueueQuota, Team
from tests.fleet.inventory import superuser
from tests.fleet.test_admin import form_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def client_root() -> Client:
    client = Client()
    client.force_login(superuser())
    return client


def test_a_quota_edit_in_the_admin_needs_a_reason_and_is_audited(client_root):
    flavor = GpuFlavor.objects.create(name="H100-SXM-80GB", product="NVIDIA H100 80GB HBM3", memory_mib=81559)
    quota = QueueQuota.objects.create(
        queue=Queue.objects.create(name="q", team=Team.objects.create(name="t")), flavor=flavor, nominal=8
    )
    url = f"/admin/scheduling/queuequota/{quota.pk}/change/"
    data = {**form_data(client_root, url), "nominal": "16"}

    assert "audit_reason" in client_root.post(url, data).context["adminform"].form.errors
    assert client_root.post(url, {**data, "audit_reason": "Q4 growth"}).status_code == 302

    event = AuditEvent.objects.for_target(quota).get()
    assert (event.verb, event.reason, event.before, event.after) == (
        "queuequota.admin_change", "Q4 growth", {"nominal": 8}, {"nominal": 16}
    )


@pytest.mark.parametrize("model", ["workload", "allocation", "preemption", "quotarequest", "workloadtransition"])
def test_workload_records_cannot_be_added_or_changed_in_the_admin(client_root, model):
    assert client_root.get(f"/admin/scheduling/{model}/").status_code == 200
    assert client_root.get(f"/admin/scheduling/{model}/add/").status_code == 403
