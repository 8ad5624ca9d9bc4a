"""The PromQL Fleetdeck sends. Each reads a series recorded by rules/fleetdeck-rules.yml, so no page
query touches the raw exporter series, and each page sends a fixed number of them at any fleet size."""
from __future__ import annotations

from datetime import timedelta

# Per GPU (labels UUID, Hostname, gpu): SM activity 0..1 and framebuffer MiB used.
SM_ACTIVE = "fleetdeck:gpu_sm_active:ratio"
FB_USED = "fleetdeck:gpu_fb_used:mib"
# Per team, queue and flavor (labels team, queue, flavor, queue_id, flavor_id): utilised GPUs of
# what each queue holds, joining the GPUs' activity to fleetdeck_gpu_allocated_share (Fleetdeck's /metrics).
QUEUE_UTILISED = "fleetdeck:queue_flavor_utilised_gpus:sum"
IDLE_BELOW = 0.05


def _regex_literal(text: str) -> str:
    """`text` as a regular expression matching only itself, inside a PromQL double-quoted string
    (where a regex backslash is written twice)."""
    return "".join(c if c.isalnum() or c in "_-" else "\\\\" + c for c in text)


def idle_latest() -> str:
    return f"{SM_ACTIVE} < {IDLE_BELOW}"


def idle_peak(window: timedelta, uuids: list[str] | None = None) -> str:
    """GPUs whose highest SM activity over `window` stayed under 5 %, and whose series reaches back to
    (almost) the window's start: one missed scrape or rule evaluation at the start is allowed.

    With `uuids` (the GPUs idle right now), only their series are read over the window: the range
    function then costs the idle GPUs' samples, not the whole fleet's."""
    window_ms = max(1000, int(window.total_seconds() * 1000))
    reach_ms = max(window_ms - 120_000, window_ms * 9 // 10)
    selector = SM_ACTIVE
    if uuids:
        selector += '{UUID=~"' + "|".join(_regex_literal(u) for u in uuids) + '"}'
    return f"max_over_time({selector}[{window_ms}ms]) < {IDLE_BELOW} and {selector} offset {reach_ms}ms"


def queue_utilised_mean(queue_ids: list[int], *, window_seconds: int) -> str:
    """Means over the last `window_seconds` of the utilised GPUs of the given queues, per flavor."""
    ids = "|".join(str(int(q)) for q in queue_ids)
    return f'sum by (flavor_id) (avg_over_time({QUEUE_UTILISED}{{queue_id=~"{ids}"}}[{int(window_seconds)}s]))'
