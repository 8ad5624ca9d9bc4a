"""A queue quota edited in the admin is refused past scheduling.limits.MAX_QUOTA_GPUS, with the
bound named, and nothing is saved or audited."""
from __future__ import annotations

import pytest
from django.test import Client

from core.models import AuditEvent
from fleet.models import GpuFlavor
from scheduling import limits
from scheduling.models import Queue, QueueQuota, Team
from tests.fleet.inventory import superuser
from tests.fleet.test_admin import form_data

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("field", ["nominal", "borrowing_limit", "lending_limit"])
def test_a_quota_past_the_bound_is_refused(field):
    client = Client()
    client.force_login(superuser())
    flavor = GpuFlavor.objects.create(name="H100-SXM-80GB", product="NVIDIA H100 80GB HBM3", memory_mib=81559)
    quota = QueueQuota.objects.create(
        queue=Queue.objects.create(name="q", team=Team.objects.create(name="t")), flavor=flavor, nominal=8
    )
    url = f"/admin/scheduling/queuequota/{quota.pk}/change/"
    data = {**form_data(client, url), field: str(10 * limits.MAX_QUOTA_GPUS), "audit_reason": "growth"}

    response = client.post(url, data)

    assert response.status_code == 200
    errors = response.context["adminform"].form.errors[field]
    assert f"less than or equal to {limits.MAX_QUOTA_GPUS}" in " ".join(errors)
    quota.refresh_from_db()
    assert (quota.nominal, quota.borrowing_limit, quota.lending_limit) == (8, None, None)
    assert not AuditEvent.objects.exists()
