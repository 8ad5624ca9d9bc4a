"""Database constraints of the inventory models."""
import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from fleet.choices import SharingMode
from fleet.models import Gpu, GpuFlavor, Node, Rack, Spine

pytestmark = pytest.mark.django_db


@pytest.fixture
def node():
    rack = Rack.objects.create(name="r1", spine=Spine.objects.create(name="s1"))
    flavor = GpuFlavor.objects.create(name="H100-SXM-80GB", product="NVIDIA H100 80GB HBM3", memory_mib=81559)
    return Node.objects.create(name="n1", rack=rack, flavor=flavor)


def make_gpu(node, index, uuid, **extra):
    return Gpu.objects.create(node=node, index=index, uuid=uuid, product="NVIDIA H100 80GB HBM3", memory_mib=81559,
                              **extra)


def test_a_gpu_uuid_is_unique_across_the_fleet(node):
    other = Node.objects.create(name="n2", rack=node.rack)
    make_gpu(node, 0, "GPU-1")
    with pytest.raises(IntegrityError), transaction.atomic():
        make_gpu(other, 0, "GPU-1")


def test_a_node_has_one_gpu_per_index(node):
    make_gpu(node, 0, "GPU-1")
    with pytest.raises(IntegrityError), transaction.atomic():
        make_gpu(node, 0, "GPU-2")


def test_the_database_refuses_an_unknown_node_state(node):
    with pytest.raises(IntegrityError), transaction.atomic():
        Node.objects.filter(pk=node.pk).update(state="exploded")


def test_the_database_refuses_an_unknown_gpu_health(node):
    gpu = make_gpu(node, 0, "GPU-1")
    with pytest.raises(IntegrityError), transaction.atomic():
        Gpu.objects.filter(pk=gpu.pk).update(health="meh")


def test_the_database_refuses_zero_sharing_replicas(node):
    with pytest.raises(IntegrityError), transaction.atomic():
        make_gpu(node, 0, "GPU-1", sharing_replicas=0)


def test_an_exclusive_gpu_with_replicas_does_not_validate(node):
    gpu = Gpu(node=node, index=0, uuid="GPU-1", product="x", memory_mib=1, sharing_mode=SharingMode.EXCLUSIVE,
              sharing_replicas=4)
    with pytest.raises(ValidationError) as exc:
        gpu.clean()
    assert "sharing_replicas" in exc.value.message_dict


def test_mig_instances_need_mig_mode(node):
    gpu = Gpu(node=node, index=0, uuid="GPU-1", product="x", memory_mib=1,
              mig_instances=[{"profile": "1g.10gb", "gi_id": 7}])
    with pytest.raises(ValidationError) as exc:
        gpu.clean()
    assert "mig_instances" in exc.value.message_dict


def test_a_rack_cannot_be_deleted_while_it_holds_nodes(node):
    from django.db.models import ProtectedError

    with pytest.raises(ProtectedError):
        node.rack.delete()


def test_an_agent_key_never_starts_with_a_dash(node, monkeypatch):
    """A key like "-x…" would read as an option on the agent's command line (--token KEY)."""
    from fleet import models

    draws = iter(["-looks-like-an-option", "key-2"])
    monkeypatch.setattr(models.secrets, "token_urlsafe", lambda n: next(draws))
    assert models.NodeAgentToken.issue(node) == "key-2"
    assert models.NodeAgentToken.objects.get(node=node).key_hash == models.NodeAgentToken.hash_key("key-2")
