"""The connection to one Kubernetes cluster, through the official `kubernetes` client's ApiClient.

Where the credentials come from: FLEETDECK KUBERNETES_KUBECONFIG (a file, e.g. the one
tests/integrations/kubernetes/cluster.sh writes) or, when it is empty and Fleetdeck runs in a pod,
the pod's service account (in-cluster config). The client brings the
credential handling (kubeconfig contexts, exec plugins, token refresh, in-cluster files) and TLS;
objects are read as plain JSON dicts, not its model classes: those cost more than the whole
reconcile at 5,000 nodes, and the readers in nodes.py and jobs.py take the API's own field names."""
from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from django.conf import settings
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

# Transient: worth a retry with backoff. Anything else the API server said is an answer.
TRANSIENT_STATUSES = frozenset({0, 408, 429, 500, 502, 503, 504})


class KubernetesError(Exception):
    def __init__(self, message: str, *, status: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.status = status

    @property
    def transient(self) -> bool:
        return self.status in TRANSIENT_STATUSES


class Gone(KubernetesError):
    """410: the resourceVersion a watch asked for is too old; list again."""


def _conf(key: str, default: Any = "") -> Any:
    return settings.FLEETDECK.get(key, default) or default


def _error(exc: Exception, what: str) -> KubernetesError:
    if isinstance(exc, ApiException):
        message = exc.reason or ""
        try:
            message = json.loads(exc.body or "{}").get("message") or message
        except (TypeError, ValueError):
            pass
        cls = Gone if exc.status == HTTPStatus.GONE else KubernetesError
        return cls(f"{what}: {exc.status} {message}", status=exc.status or 0)
    return KubernetesError(f"{what}: {exc}", status=0)


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: dict[str, Any]


class Cluster:
    """The few calls Fleetdeck makes, on JSON dicts; every failure is a KubernetesError."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self.api_client = api_client

    def request(self, method: str, path: str, *, query: list[tuple[str, str]] | None = None,
                body: Any = None, content_type: str = "application/json", what: str = "",
                timeout: float | tuple[float, float] = 30, stream: bool = False) -> Any:
        """One API call: the decoded JSON answer, or (stream=True) the open urllib3 response."""
        what = what or f"{method} {path}"
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        try:
            serialized = self.api_client.param_serialize(
                method, path, query_params=query or [], header_params=headers, body=body,
                auth_settings=["BearerToken"])
            response = self.api_client.call_api(*serialized[:4], _request_timeout=timeout)
        except (ApiException, HTTPError, OSError) as exc:
            raise _error(exc, what) from exc
        raw = response.response
        if response.status >= 400:
            data = raw.data
            raw.release_conn()
            raise _error(ApiException(status=response.status, reason=response.reason, body=data), what)
        if stream:
            return raw
        try:
            return json.loads(raw.data or b"{}")
        except (HTTPError, OSError) as exc:
            raise _error(exc, what) from exc
        finally:
            raw.release_conn()

    def list(self, path: str, *, label_selector: str = "", limit: int = 500) -> tuple[list[dict], str]:
        """Every object of a collection (paged), and the list's resourceVersion to watch from."""
        items: list[dict] = []
        token = ""
        while True:
            query = [("limit", str(limit))]
            if label_selector:
                query.append(("labelSelector", label_selector))
            if token:
                query.append(("continue", token))
            page = self.request("GET", path, query=query, what=f"list {path}", timeout=(10, 120))
            items += page.get("items") or []
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return items, page["metadata"]["resourceVersion"]

    def watch(self, path: str, *, resource_version: str, label_selector: str = "",
              timeout_seconds: int = 300) -> Iterator[WatchEvent]:
        """Events of a collection (`/api/v1/nodes`, `/apis/batch/v1/jobs`) after resource_version,
        bookmarks included, until the server ends the watch. Raises Gone when the version is too old."""
        query = [("watch", "true"), ("resourceVersion", resource_version), ("allowWatchBookmarks", "true"),
                 ("timeoutSeconds", str(timeout_seconds))]
        if label_selector:
            query.append(("labelSelector", label_selector))
        response = self.request("GET", path, query=query, what=f"watch {path}", stream=True,
                                timeout=(10, timeout_seconds + 10))
        try:
            buffer = b""
            for chunk in response.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield _event(json.loads(line), path)
        except (HTTPError, OSError) as exc:
            raise _error(exc, f"watch {path}") from exc
        finally:
            response.release_conn()

    # --- nodes -------------------------------------------------------------------------------

    def node(self, name: str) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/nodes/{name}", what=f"get node {name}")

    def node_patch(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        # A JSON merge patch: lists (taints) are replaced whole, nulls delete.
        return self.request("PATCH", f"/api/v1/nodes/{name}", body=patch,
                            content_type="application/merge-patch+json", what=f"patch node {name}")

    # --- jobs and pods -----------------------------------------------------------------------

    def job(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}",
                                what=f"get job {namespace}/{name}")
        except KubernetesError as exc:
            if exc.status == HTTPStatus.NOT_FOUND:
                return None
            raise

    def job_create(self, namespace: str, body: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        return self.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body=body,
                            query=[("dryRun", "All")] if dry_run else None, what=f"create job in {namespace}")

    def job_patch(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}", body=patch,
                            content_type="application/merge-patch+json", what=f"patch job {namespace}/{name}")

    def pods(self, namespace: str, *, label_selector: str) -> list[dict[str, Any]]:
        page = self.request("GET", f"/api/v1/namespaces/{namespace}/pods",
                            query=[("labelSelector", label_selector)], what=f"list pods in {namespace}")
        return page.get("items") or []

    def pod_bind(self, namespace: str, pod: str, node: str) -> None:
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod, "namespace": namespace},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        self.request("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/binding", body=body,
                     what=f"bind pod {namespace}/{pod} to {node}")

    def pod_delete(self, namespace: str, pod: str, *, grace_seconds: int) -> None:
        try:
            self.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod}",
                         query=[("gracePeriodSeconds", str(grace_seconds))], what=f"delete pod {namespace}/{pod}")
        except KubernetesError as exc:
            if exc.status != HTTPStatus.NOT_FOUND:
                raise


def _event(raw: dict[str, Any], path: str) -> WatchEvent:
    if raw.get("type") == "ERROR":
        status = raw.get("object") or {}
        status_code = int(status.get("code") or 0)
        cls = Gone if status_code == HTTPStatus.GONE else KubernetesError
        raise cls(f"watch {path}: {status_code} {status.get('message', '')}", status=status_code)
    return WatchEvent(type=raw.get("type", ""), object=raw.get("object") or {})


_lock = threading.Lock()
_clusters: dict[tuple[str, str], Cluster] = {}


def get_cluster() -> Cluster:
    """The configured cluster (kubeconfig file, else the pod's service account), built once per config."""
    path = str(_conf("KUBERNETES_KUBECONFIG", os.environ.get("KUBECONFIG", "")))
    context = str(_conf("KUBERNETES_CONTEXT", ""))
    key = (path, context)
    with _lock:
        if key not in _clusters:
            configuration = k8s.Configuration()
            try:
                if path:
                    k8s_config.load_kube_config(config_file=path, context=context or None,
                                                client_configuration=configuration)
                else:
                    k8s_config.load_incluster_config(client_configuration=configuration)
            except (k8s_config.ConfigException, OSError) as exc:
                raise KubernetesError(f"no Kubernetes credentials: {exc}") from exc
            configuration.connection_pool_maxsize = 16
            _clusters[key] = Cluster(k8s.ApiClient(configuration))
        return _clusters[key]
