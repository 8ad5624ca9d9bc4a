"""A new installation gets the seed's priority classes with one command, without touching classes
an operator already tuned."""
from django.core.management import call_command

from core.models import AuditEvent
from scheduling.models import PriorityClass


def test_seed_creates_the_four_classes_once_and_keeps_operator_changes(db, capsys):
    PriorityClass.objects.create(name="training-prod", value=777, grace_seconds=300)

    call_command("seed_priority_classes")

    assert "inference-online, research-batch, opportunistic" in capsys.readouterr().out
    classes = {pc.name: pc for pc in PriorityClass.objects.all()}
    assert list(classes) == ["inference-online", "training-prod", "research-batch", "opportunistic"]
    assert classes["inference-online"].may_preempt and not classes["inference-online"].preemptible
    assert classes["opportunistic"].value < 0 and classes["research-batch"].preemptible
    assert (classes["training-prod"].value, classes["training-prod"].grace_seconds) == (777, 300)
    assert {pc.grace_seconds for name, pc in classes.items() if name != "training-prod"} == {60}
    assert AuditEvent.objects.filter(verb="priorityclass.seed").count() == 3

    call_command("seed_priority_classes")
    assert "none (all exist)" in capsys.readouterr().out
    assert AuditEvent.objects.filter(verb="priorityclass.seed").count() == 3
