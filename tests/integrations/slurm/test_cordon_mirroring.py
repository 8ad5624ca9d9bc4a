"""Cordon/uncordon of a Slurm node → scontrol drain/resume, with a fake scontrol on a fake PATH:
the outcome is recorded on the node and a failure is never swallowed."""
from __future__ import annotations

import textwrap

import pytest

from core.actors import Actor
from core.models import AuditEvent
from fleet.models import Node, Rack
from fleet.services import node_cordon, node_uncordon
from integrations.slurm.cli import SlurmCli, SlurmCommandFailed, SlurmUnavailable

pytestmark = pytest.mark.django_db
OPERATOR = Actor(label="olga")


# By default scontrol behaves like Slurm for one node n3: `update` drains or resumes it and
# `-o show node` shows the result.
SLURM_LIKE = """\
if [ "$1" = update ]; then
  case "$3" in State=DRAIN) echo IDLE+DRAIN > {state} ;; State=RESUME) echo IDLE > {state} ;; esac
  exit 0
fi
echo "NodeName=n3 Gres=gpu:8 State=$(cat {state} 2>/dev/null || echo IDLE)"
"""


@pytest.fixture
def fake_bin(tmp_path, settings, slurm_settings, celery_eager):
    """A directory whose `scontrol` runs the shell snippet written to tmp_path/behaviour."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/bash
        echo "$@" >> {tmp_path}/calls
        source {tmp_path}/behaviour
        """))
    script.chmod(0o755)
    settings.FLEETDECK = {**settings.FLEETDECK, "SLURM_BIN_DIR": str(bin_dir), "SLURM_COMMAND_TIMEOUT": 2}

    def behave(snippet: str) -> None:
        (tmp_path / "behaviour").write_text(snippet)

    behave(SLURM_LIKE.format(state=tmp_path / "state"))
    behave.calls = lambda: (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    return behave


@pytest.fixture
def node(db) -> Node:
    return Node.objects.create(name="n3", rack=Rack.objects.create(name="r1"), executor="slurm", pool="slurm")


def cordon(node, capture, reason="Xid 79; fell off the bus <GPU 3>"):
    with capture(execute=True):
        node_cordon(node=node, reason=reason, actor=OPERATOR)
    return Node.objects.get(pk=node.pk)


def test_a_cordon_drains_the_node_with_the_reason_and_records_it_applied(node, fake_bin,
                                                                          django_capture_on_commit_callbacks):
    node = cordon(node, django_capture_on_commit_callbacks)
    assert fake_bin.calls() == ["update NodeName=n3 State=DRAIN Reason=Xid 79; fell off the bus <GPU 3>",
                                "-o show node n3"]
    assert node.labels["slurm.applied"] is True and node.labels["slurm.error"] == ""
    assert node.labels["slurm.state"] == "IDLE+DRAIN"  # what Slurm showed, before the next sync
    event = AuditEvent.objects.get(verb="slurm.drain_applied", actor="olga")
    assert (event.before, event.after) == ({"slurm": "drain pending"},
                                           {"slurm": "drain applied", "slurm.state": "IDLE+DRAIN"})


def test_a_drain_scontrol_accepts_but_slurm_does_not_show_is_not_applied(node, fake_bin,
                                                                         django_capture_on_commit_callbacks):
    fake_bin('[ "$1" = update ] && exit 0; echo "NodeName=n3 Gres=gpu:8 State=IDLE"')
    node = cordon(node, django_capture_on_commit_callbacks)
    assert node.labels["slurm.applied"] is False and node.labels["slurm.state"] == "IDLE"
    assert node.labels["slurm.error"] == "scontrol accepted the drain, but Slurm shows n3 IDLE"
    assert AuditEvent.objects.get(verb="slurm.drain_failed").after["slurm"] == "drain NOT applied"


def test_a_refused_drain_is_recorded_on_the_node_and_audited(node, fake_bin, django_capture_on_commit_callbacks):
    fake_bin('echo "slurm_update error: Invalid node name specified" >&2; exit 1')
    node = cordon(node, django_capture_on_commit_callbacks)
    assert node.state == "cordoned"  # Fleetdeck's cordon stands
    assert node.labels["slurm.applied"] is False
    assert "Invalid node name specified" in node.labels["slurm.error"]
    event = AuditEvent.objects.get(verb="slurm.drain_failed")
    assert "Invalid node name" in event.reason
    assert len(fake_bin.calls()) == 1  # not retried: Slurm said no


def test_an_unreachable_controller_is_retried_then_recorded_as_failed(node, fake_bin):
    from celery.exceptions import Retry

    from integrations.slurm.tasks import MAX_RETRIES, slurm_node_drain

    fake_bin('echo "slurm_update error: Unable to contact slurm controller (connect failure)" >&2; exit 1')
    Node.objects.filter(pk=node.pk).update(state="cordoned")
    with pytest.raises(Retry):
        slurm_node_drain.apply(args=(node.pk, "Xid 79", "olga"), throw=True)
    assert "slurm.applied" not in Node.objects.get(pk=node.pk).labels  # nothing recorded while retrying

    # The last retry gives up and records it.
    assert slurm_node_drain.apply(args=(node.pk, "Xid 79", "olga"), retries=MAX_RETRIES).get() == "failed"
    node = Node.objects.get(pk=node.pk)
    assert node.labels["slurm.applied"] is False and "gave up after 5 retries" in node.labels["slurm.error"]
    assert "Unable to contact slurm controller" in node.labels["slurm.error"]
    assert AuditEvent.objects.filter(verb="slurm.drain_failed").count() == 1


def test_a_retry_after_the_operator_changed_their_mind_does_nothing(node, fake_bin):
    from integrations.slurm.tasks import slurm_node_drain

    assert slurm_node_drain.apply(args=(node.pk, "Xid 79", "olga")).get() == "skipped: node is ready now"
    assert fake_bin.calls() == []


def test_a_hung_scontrol_times_out_as_unavailable(fake_bin):
    fake_bin("sleep 5")
    from django.conf import settings

    cli = SlurmCli(bin_dir=settings.FLEETDECK["SLURM_BIN_DIR"], timeout=0.5)
    with pytest.raises(SlurmUnavailable, match="did not finish within 0.5 s"):
        cli.node_drain("n3", "x")


def test_resume_on_a_never_registered_node_counts_as_applied_when_the_drain_is_gone(node, fake_bin,
                                                                                     django_capture_on_commit_callbacks):
    cordon(node, django_capture_on_commit_callbacks)
    fake_bin(textwrap.dedent("""\
        if [ "$1" = update ]; then echo "slurm_update error: Invalid node state specified" >&2; exit 1; fi
        echo "NodeName=n3 Gres=gpu:8 State=UNKNOWN"
        """))
    with django_capture_on_commit_callbacks(execute=True):
        node_uncordon(node=node, reason="fixed", actor=OPERATOR)
    node = Node.objects.get(pk=node.pk)
    assert node.labels["slurm.op"] == "resume" and node.labels["slurm.applied"] is True


def test_resume_that_leaves_the_node_drained_is_a_failure(fake_bin):
    fake_bin(textwrap.dedent("""\
        if [ "$1" = update ]; then echo "slurm_update error: Invalid node state specified" >&2; exit 1; fi
        echo "NodeName=n3 Gres=gpu:8 State=IDLE+DRAIN Reason=still bad [root@2026-11-29T10:00:00]"
        """))
    from django.conf import settings

    with pytest.raises(SlurmCommandFailed, match="Invalid node state"):
        SlurmCli(bin_dir=settings.FLEETDECK["SLURM_BIN_DIR"]).node_resume("n3")


def test_with_slurm_disabled_the_node_says_it_was_not_drained(node, fake_bin, settings,
                                                              django_capture_on_commit_callbacks):
    settings.FLEETDECK = {**settings.FLEETDECK, "SLURM_ENABLED": False}
    node = cordon(node, django_capture_on_commit_callbacks)
    assert fake_bin.calls() == []
    assert node.labels["slurm.applied"] is False and "SLURM_ENABLED" in node.labels["slurm.error"]


def test_nodes_of_other_executors_are_not_touched(fake_bin, django_capture_on_commit_callbacks):
    node = Node.objects.create(name="sim1", rack=Rack.objects.create(name="r9"))
    node = cordon(node, django_capture_on_commit_callbacks)
    assert fake_bin.calls() == [] and "slurm.applied" not in node.labels


def test_the_node_page_include_shows_a_failed_drain(node):
    node.labels = {"slurm.state": "IDLE", "slurm.op": "drain", "slurm.applied": False,
                   "slurm.error": "`scontrol update` failed: Invalid node name specified"}
    node.save()
    from django.template.loader import render_to_string

    html = render_to_string("fleet/_slurm_status.html", {"node": node})
    assert "NOT applied" in html and "Invalid node name specified" in html and "<code>IDLE</code>" in html


def test_the_node_page_include_shows_a_pending_change_and_what_slurm_never_reported(node):
    from django.template.loader import render_to_string

    html = render_to_string("fleet/_slurm_status.html", {"node": node})
    assert "not read from Slurm yet" in html and "no cordon or uncordon sent to Slurm yet" in html
    node.labels = {"slurm.state": "IDLE", "slurm.op": "drain", "slurm.applied": None, "slurm.error": ""}
    html = render_to_string("fleet/_slurm_status.html", {"node": node})
    assert "drain: <span" in html and ">pending</span>" in html and 'id="slurm-error"' not in html
