"""The inventory admin: every edit asks why and lands in the audit log, which the admin shows."""
from __future__ import annotations

import pytest
from django.core.management import call_command
from django.forms import MultiWidget
from django.test import Client

from core.admin import ADMIN_DELETE_REASON
from core.models import AuditEvent
from fleet.models import Gpu, Node, Spine

from .inventory import EXAMPLE, superuser

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client() -> Client:
    call_command("import_fleet", str(EXAMPLE), stdout=open("/dev/null", "w"))
    AuditEvent.objects.all().delete()
    client = Client()
    client.force_login(superuser())
    return client


def form_data(client: Client, url: str) -> dict[str, str]:
    """What the browser would post back unchanged: the main form and every inline formset."""
    context = client.get(url).context
    data = {}
    forms = [context["adminform"].form]
    for inline in context["inline_admin_formsets"]:
        formset = inline.formset
        management = formset.management_form
        data.update({management[name].html_name: management[name].value() for name in management.fields})
        forms += formset.forms
    for form in forms:
        for name, field in form.fields.items():
            value = form[name].value()
            if value is None or value is False:
                continue
            put(data, field.widget, form[name].html_name, value)
            if field.show_hidden_initial:  # fields with a callable default, e.g. labels, date_joined
                put(data, field.hidden_widget(), form[name].html_initial_name, value)
    return data


def put(data: dict, widget, name: str, value) -> None:
    if isinstance(widget, MultiWidget):  # e.g. a date and a time input for one datetime
        for i, part in enumerate(widget.decompress(value)):
            data[f"{name}_{i}"] = part
    else:
        data[name] = "on" if value is True else value


def test_a_node_edit_needs_a_reason_and_is_audited_with_before_and_after(admin_client):
    node = Node.objects.get(name="gpu-a01")
    url = f"/admin/fleet/node/{node.pk}/change/"
    data = {**form_data(admin_client, url), "hostname": "gpu-a01.new.internal"}

    response = admin_client.post(url, data)
    assert response.status_code == 200 and "audit_reason" in response.context["adminform"].form.errors
    assert Node.objects.get(pk=node.pk).hostname == "gpu-a01.example.internal"

    response = admin_client.post(url, {**data, "audit_reason": "DNS rename"})
    assert response.status_code == 302
    event = AuditEvent.objects.for_target(node).get()
    assert (event.verb, event.actor, event.reason) == ("node.admin_change", "root", "DNS rename")
    assert (event.before, event.after) == ({"hostname": "gpu-a01.example.internal"},
                                           {"hostname": "gpu-a01.new.internal"})


def test_a_gpu_edited_inline_on_its_node_is_audited_with_the_nodes_reason(admin_client):
    node = Node.objects.get(name="gpu-a01")
    url = f"/admin/fleet/node/{node.pk}/change/"
    data = form_data(admin_client, url)
    gpu = Gpu.objects.get(node=node, index=1)
    field = next(k for k, v in data.items() if k.endswith("-id") and str(v) == str(gpu.pk)).removesuffix("-id")
    data[f"{field}-pci_bus_id"] = "0000:2b:00.0"

    assert admin_client.post(url, {**data, "audit_reason": "riser swapped"}).status_code == 302
    event = AuditEvent.objects.for_target(gpu).get()
    assert (event.verb, event.reason, event.after) == ("gpu.admin_change", "riser swapped",
                                                       {"pci_bus_id": "0000:2b:00.0"})
    assert not AuditEvent.objects.for_target(node).exists(), "the node itself did not change"


def test_adding_and_deleting_in_the_admin_is_audited(admin_client):
    response = admin_client.post("/admin/fleet/spine/add/", {
        "name": "s9", "audit_reason": "new pod", "racks-TOTAL_FORMS": "0", "racks-INITIAL_FORMS": "0"})
    assert response.status_code == 302, response.context["adminform"].form.errors
    spine = Spine.objects.get(name="s9")
    added = AuditEvent.objects.for_target(spine).get()
    assert (added.verb, added.reason, added.after) == ("spine.admin_add", "new pod", {"name": "s9"})

    response = admin_client.post(f"/admin/fleet/spine/{spine.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302 and not Spine.objects.filter(name="s9").exists()
    deleted = AuditEvent.objects.filter(verb="spine.admin_delete").get()
    assert (deleted.target_repr, deleted.actor, deleted.reason) == ("s9", "root", ADMIN_DELETE_REASON)


def test_the_admin_lists_audit_events_read_only(admin_client):
    node = Node.objects.get(name="gpu-a01")
    admin_client.post("/api/v1/nodes/gpu-a01/cordon/", {"reason": "fan failure"}, content_type="application/json")
    body = admin_client.get("/admin/core/auditevent/").content.decode()
    assert "node.cordon" in body and "fan failure" in body
    event = AuditEvent.objects.for_target(node).get()
    assert admin_client.get(f"/admin/core/auditevent/{event.pk}/change/").status_code == 200
    assert admin_client.get("/admin/core/auditevent/add/").status_code == 403
    admin_client.post(f"/admin/core/auditevent/{event.pk}/change/", {"reason": "rewritten"})
    assert AuditEvent.objects.get(pk=event.pk).reason == "fan failure"


def test_making_someone_an_operator_in_the_admin_is_audited_without_passwords(admin_client):
    from django.contrib.auth.models import Group, User

    from core.roles import OPERATORS_GROUP, is_operator

    operators = Group.objects.create(name=OPERATORS_GROUP)
    response = admin_client.post("/admin/auth/user/add/", {
        "username": "dana", "password1": "a-long-pass-phrase", "password2": "a-long-pass-phrase",
        "usable_password": "true", "audit_reason": "new on-call engineer"})
    assert response.status_code == 302, response.context["adminform"].form.errors
    dana = User.objects.get(username="dana")
    added = AuditEvent.objects.for_target(dana).get()
    assert (added.verb, added.reason, added.after) == ("user.admin_add", "new on-call engineer", {"username": "dana"})

    url = f"/admin/auth/user/{dana.pk}/change/"
    data = {**form_data(admin_client, url), "groups": [operators.pk]}
    response = admin_client.post(url, data)
    assert response.status_code == 200 and "audit_reason" in response.context["adminform"].form.errors
    assert not is_operator(User.objects.get(pk=dana.pk))

    assert admin_client.post(url, {**data, "audit_reason": "joins the ops rota"}).status_code == 302
    assert is_operator(User.objects.get(pk=dana.pk))
    change = AuditEvent.objects.for_target(dana).get(verb="user.admin_change")
    assert (change.actor, change.reason, change.before, change.after) == (
        "root", "joins the ops rota", {"groups": []}, {"groups": [operators.pk]})
    assert "a-long-pass-phrase" not in str(list(AuditEvent.objects.values_list("before", "after")))
