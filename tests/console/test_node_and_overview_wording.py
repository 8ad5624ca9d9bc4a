"""What the node page and the overview's fragmentation table show, as the screenshots of issue 15
found them wanting: replicas that read as racks, raw ids in the history, an override box on a
node with no ticket, free GPUs of degraded nodes missing from the fragmentation table."""
from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.actors import Actor
from core.models import AuditEvent
from fleet.models import GpuFlavor, Node, Rack
from health.services import ticket_open

from .test_pages import fleet, login  # noqa: F401 - `fleet` is a fixture

pytestmark = pytest.mark.django_db

OPS = Actor.automation("test")


def cell(body: str, table_id: str, row_key: str) -> list[str]:
    """The cells of the row of table `table_id` whose first cell is `row_key`, tags stripped."""
    table = body[body.index(f'id="{table_id}"'):]
    table = table[:table.index("</table>")]
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S):
        cells = [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", row, re.S)]
        if cells and cells[0] == row_key:
            return cells
    raise AssertionError(f"no row {row_key!r} in #{table_id}")


def test_allocations_name_the_replica_not_something_that_reads_as_a_rack(fleet, viewer, client):  # noqa: F811
    body = login(client, viewer).get("/nodes/h1/").content.decode()
    gpu0 = cell(body, "gpus", "0")
    assert gpu0[-1] == "train-llm main replica 0"
    assert not re.search(r">\s*r\d", body.split('id="gpus"')[1].split("</table>")[0])


def test_shared_allocations_say_milli_gpu(fleet, viewer, client):  # noqa: F811
    body = login(client, viewer).get("/nodes/a1/").content.decode()
    assert "notebook main replica 0 · 500 milli-GPU" in re.sub(r"<[^>]+>", "", cell(body, "gpus", "1")[-1])


def test_history_names_racks_and_flavors_in_one_query_each(fleet, viewer, client):  # noqa: F811
    node = Node.objects.get(name="h2")
    r1, r2 = Rack.objects.get(name="r1"), Rack.objects.get(name="r2")
    h100 = GpuFlavor.objects.get(name="H100")
    target = {"target_type": "fleet.node", "target_id": str(node.pk), "target_repr": "h2"}
    # As fleet.services.imports records them: foreign keys by id.
    AuditEvent.objects.create(actor="import", verb="node.create", after={"rack": r1.pk, "flavor": h100.pk}, **target)
    for i in range(5):
        AuditEvent.objects.create(actor="import", verb="node.update", before={"rack": r1.pk}, after={"rack": r2.pk},
                                  reason=f"move {i}", **target)
    AuditEvent.objects.create(actor="import", verb="node.update", before={"flavor": h100.pk}, after={"flavor": 99999},
                              **target)
    login(client, viewer)
    body = client.get("/nodes/h2/").content.decode()
    history = body[body.index('id="history"'):]
    assert "rack: r1 → r2" in history and "flavor: H100" in history and "rack: r1<br>" in history
    assert "flavor: H100 → #99999 (deleted)" in history
    assert not re.search(r"(rack|flavor): \d", history)

    with CaptureQueriesContext(connection) as few:
        client.get("/nodes/h2/")
    for _ in range(20):
        AuditEvent.objects.create(actor="import", verb="node.update", before={"rack": r2.pk}, after={"rack": r1.pk},
                                  **target)
    with CaptureQueriesContext(connection) as many:
        client.get("/nodes/h2/")
    assert len(many) == len(few)


def test_the_override_box_shows_only_on_a_node_with_an_open_ticket(fleet, operator, client):  # noqa: F811
    login(client, operator)
    no_ticket = client.get("/nodes/h4/").content.decode()
    assert 'action="/nodes/h4/uncordon/"' in no_ticket
    assert 'name="override"' not in no_ticket and "Override" not in no_ticket

    ticket, _ = ticket_open(node=Node.objects.get(name="h4"), evidence="XID 79 on GPU 2", actor=OPS)
    with_ticket = client.get("/nodes/h4/").content.decode()
    assert 'name="override"' in with_ticket
    assert re.search(rf"Override open repair ticket <a href=\"/health/tickets/{ticket.pk}/\">#{ticket.pk}</a> \(open;",
                     with_ticket)
    refused = client.post("/nodes/h4/uncordon/", {"reason": "try", "confirm": "yes"})
    assert refused.status_code == 400 and 'name="override"' in refused.content.decode()


def test_the_fragmentation_table_accounts_for_every_free_gpu(fleet, viewer, client):  # noqa: F811
    body = login(client, viewer).get("/").content.decode()
    flavor, free, fully_free, partial, unschedulable, unhealthy = cell(body, "fragmentation", "H100")
    # h2 fully free (4); h1 runs something (2 idle); h3 has an unhealthy GPU (3 healthy idle).
    assert (free, fully_free, partial, unschedulable, unhealthy) == ("9", "1 (4 GPUs)", "5", "3", "1")
    assert cell(body, "fragmentation", "All")[1:3] == ["9", "1 (4 GPUs)"]
