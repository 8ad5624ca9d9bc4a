"""Which devices a pod got, where the API server says so: pure readers, no Django, no API calls.

With the NVIDIA device plugin (`nvidia.com/gpu` as an extended resource) the kubelet picks the
devices and tells only the container runtime and its own PodResources socket on the node; the API
server shows nothing about them, so Fleetdeck records nothing. With Dynamic Resource Allocation
(resource.k8s.io/v1, GA in Kubernetes 1.34) the allocation is an API object: the pod names its
ResourceClaims (`spec.resourceClaims[].resourceClaimName` for a claim of its own,
`status.resourceClaimStatuses[].resourceClaimName` for one made from a template,
`status.extendedResourceClaimStatus.resourceClaimName` for an extended resource DRA satisfies),
and each claim's `status.allocation.devices.results` lists driver, pool and device per request.
A driver's ResourceSlice for the node gives each device's attributes; the NVIDIA DRA driver
publishes the GPU's `uuid` there, which ties the device to Fleetdeck's GPU row."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def pod_claim_names(pod: Mapping[str, Any]) -> list[str]:
    """The ResourceClaims a pod's devices come from, in the order the pod names them (no duplicates)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    names = [c.get("resourceClaimName") for c in spec.get("resourceClaims") or []]
    names += [c.get("resourceClaimName") for c in status.get("resourceClaimStatuses") or []]
    names.append((status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName"))
    return list(dict.fromkeys(n for n in names if n))


def claim_results(claim: Mapping[str, Any]) -> list[dict[str, str]]:
    """A claim's allocated devices (request, driver, pool, device); [] while it is not allocated."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return [{key: str(r.get(key, "")) for key in ("request", "driver", "pool", "device")} for r in results]


def slice_uuids(slices: list[Mapping[str, Any]]) -> dict[tuple[str, str, str], str]:
    """(driver, pool, device) -> the `uuid` attribute a ResourceSlice publishes for the device."""
    found = {}
    for item in slices:
        spec = item.get("spec") or {}
        driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
        for device in spec.get("devices") or []:
            uuid = ((device.get("attributes") or {}).get("uuid") or {}).get("string")
            if uuid:
                found[(driver, pool, device.get("name", ""))] = uuid
    return found


def pod_devices(pod: Mapping[str, Any], claims: Mapping[str, Mapping[str, Any]],
                uuids: Mapping[tuple[str, str, str], str] | None = None) -> list[dict[str, Any]]:
    """One entry per device the pod's allocated claims hold: the pod, its node, the claim and the
    claim's result, with the GPU's UUID where a ResourceSlice names it."""
    meta = pod.get("metadata") or {}
    out = []
    for name in pod_claim_names(pod):
        for result in claim_results(claims.get(name) or {}):
            entry: dict[str, Any] = {"pod": meta.get("name", ""), "node": (pod.get("spec") or {}).get("nodeName", ""),
                                     "claim": name, **result}
            uuid = (uuids or {}).get((result["driver"], result["pool"], result["device"]))
            if uuid:
                entry["uuid"] = uuid
            out.append(entry)
    return out
