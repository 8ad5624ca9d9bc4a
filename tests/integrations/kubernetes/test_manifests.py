"""The shipped manifests are valid for the real API server: every object of clusterrole.yaml and
fleetdeck.yaml passes a server-side dry run (admission, validation, defaulting; nothing is stored)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[3] / "integrations" / "kubernetes" / "deploy"
PATHS = {
    "Namespace": "/api/v1/namespaces/{name}",
    "ServiceAccount": "/api/v1/namespaces/{namespace}/serviceaccounts/{name}",
    "Secret": "/api/v1/namespaces/{namespace}/secrets/{name}",
    "ConfigMap": "/api/v1/namespaces/{namespace}/configmaps/{name}",
    "Service": "/api/v1/namespaces/{namespace}/services/{name}",
    "Deployment": "/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}",
}
pytestmark = [pytest.mark.slow, pytest.mark.kubernetes]


@pytest.mark.parametrize("manifest", ["clusterrole.yaml", "fleetdeck.yaml"])
def test_every_object_passes_a_server_side_dry_run(k8s_admin, manifest):
    documents = [d for d in yaml.safe_load_all((DEPLOY / manifest).read_text()) if d]
    assert documents
    for doc in documents:
        meta = doc["metadata"]
        path = PATHS[doc["kind"]].format(name=meta["name"], namespace=meta.get("namespace", ""))
        answer = k8s_admin.request("PATCH", path, body=doc, content_type="application/apply-patch+yaml",
                                   query=[("dryRun", "All"), ("fieldManager", "fleetdeck-tests"), ("force", "true")])
        assert answer["kind"] == doc["kind"] and answer["metadata"]["name"] == meta["name"]
