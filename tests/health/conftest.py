"""Node tokens, kernel-log lines for the seed's cluster (tests/conftest.py) and an API client per role."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from fleet.models import Gpu, Node, NodeAgentToken

XID_79 = "May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."


def pci_of(node: str, index: int) -> str:
    """Bus ids in the style of an H100 board: 0000:1a:00, 0000:2a:00, ..."""
    return f"0000:{(index + 1) * 16 + 10:02x}:00"


@pytest.fixture
def with_pci(request):
    request.getfixturevalue("cluster")
    for gpu in Gpu.objects.select_related("node"):
        gpu.pci_bus_id = f"00000000:{pci_of(gpu.node.name, gpu.index)[5:7].upper()}:00.0"
        gpu.save(update_fields=["pci_bus_id"])
    return request.getfixturevalue("cluster")


def token_for(node_name: str) -> str:
    return NodeAgentToken.issue(Node.objects.get(name=node_name))


def agent_client(node_name: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_for(node_name)}")
    return client


def xid_line(node: str, index: int, xid_line_text: str = XID_79) -> str:
    return xid_line_text.replace("0000:2b:00", pci_of(node, index))
