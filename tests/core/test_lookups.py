"""`field__any_of=ids` selects exactly what `field__in=ids` selects, on every database."""
import pytest

from fleet.models import Gpu, GpuFlavor, Node, Rack


@pytest.fixture
def nodes(db):
    flavor = GpuFlavor.objects.create(name="H100", product="NVIDIA H100 80GB HBM3", memory_mib=81559)
    rack = Rack.objects.create(name="r1")
    made = [Node.objects.create(name=f"n{i}", rack=rack, flavor=flavor) for i in range(5)]
    for node in made:
        Gpu.objects.bulk_create(Gpu(uuid=f"GPU-{node.name}-{g}", node=node, index=g, product=flavor.product,
                                    memory_mib=flavor.memory_mib) for g in range(2))
    return made


@pytest.mark.parametrize("picked", [[], [0], [1, 3], [0, 1, 2, 3, 4]])
def test_any_of_selects_the_rows_in_selects(nodes, picked):
    ids = [nodes[i].pk for i in picked]
    assert sorted(Node.objects.filter(pk__any_of=ids).values_list("pk", flat=True)) == sorted(ids)
    # Through a relation, and excluded.
    assert sorted(Gpu.objects.filter(node_id__any_of=ids).values_list("uuid", flat=True)) == sorted(
        Gpu.objects.filter(node_id__in=ids).values_list("uuid", flat=True))
    assert sorted(Node.objects.exclude(pk__any_of=ids).values_list("pk", flat=True)) == sorted(
        n.pk for i, n in enumerate(nodes) if i not in picked)


def test_an_id_that_is_no_whole_number_is_refused(nodes):
    with pytest.raises(ValueError):
        list(Node.objects.filter(pk__any_of=["n1"]))
