"""Two operators cordoning the same node at the same moment: the row lock makes the second a no-op,
so the node is cordoned once and audited once (PostgreSQL; SQLite serialises writers anyway)."""
from __future__ import annotations

import threading

import pytest
from django.db import connection

from core.actors import Actor
from core.models import AuditEvent
from fleet.models import Node
from fleet.services import node_cordon

from .inventory import fleet_doc, import_doc


@pytest.mark.slow
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_cordons_of_one_node_write_one_audit_row(require_postgres):
    import_doc(fleet_doc("n1", gpus=1))
    node = Node.objects.get(name="n1")
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def cordon(who: str) -> None:
        try:
            barrier.wait()
            node_cordon(node=node, reason=f"seen by {who}", actor=Actor.automation(who))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=cordon, args=(f"op{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    assert AuditEvent.objects.filter(verb="node.cordon").count() == 1
    node.refresh_from_db()
    assert node.state == "cordoned" and node.cordon_reason.startswith("seen by op")
