"""The exporter scrape against real HTTP: a local http.server serving a real dcgm-exporter dump,
a slow exporter (timeout), an oversized answer, and recovery on the next good scrape."""
from __future__ import annotations

import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from fleet.models import Gpu, Node
from health.models import GpuReading, HealthEvent
from health.services import exporters_scrape, scrape
from health.tasks import exporters_scrape_task

T4_UUID = "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"


class _Exporter(BaseHTTPRequestHandler):
    dump = b""
    slow_s = 2.0

    def do_GET(self):  # noqa: N802  (http.server's name)
        if self.path == "/slow":
            time.sleep(self.slow_s)
        body = b"# " + b"x" * (6 * 1024 * 1024) + b"\n" if self.path == "/huge" else self.dump
        if self.path == "/garbage":
            body = b"<html><body>502 Bad Gateway</body></html>\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the scraper gave up (timeout, size limit): that is the point

    def log_message(self, *args):
        pass


@pytest.fixture
def exporter(shared_dir):
    _Exporter.dump = (shared_dir / "telemetry/dcgm/t4_driver460_datadog-integrations-core.prom").read_bytes()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Exporter)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def n1_is_the_t4(cluster):
    Gpu.objects.filter(node__name="n1", index=0).update(uuid=T4_UUID)


def test_a_real_dump_over_http_is_stored_with_its_values(exporter, n1_is_the_t4, clock, settings):
    Node.objects.filter(name="n1").update(exporter_url=f"{exporter}/metrics")
    outcome = exporters_scrape(now=clock.now)
    assert outcome.scraped == ["n1"] and outcome.failed == {}
    reading = GpuReading.objects.get(gpu__uuid=T4_UUID)
    # From the dump: DCGM_FI_DEV_GPU_TEMP 25, DCGM_FI_DEV_POWER_USAGE 8.969, DCGM_FI_DEV_FB_FREE 15109.
    assert (reading.temperature_c, reading.power_w, reading.fb_free_mib, reading.gpu_util) == (25, 8.969, 15109, 0)
    assert Node.objects.get(name="n1").last_heartbeat == clock.now


def test_the_beat_task_scrapes_through_the_same_path(exporter, n1_is_the_t4):
    Node.objects.filter(name="n1").update(exporter_url=f"{exporter}/metrics")
    assert exporters_scrape_task() == {"scraped": 1, "failed": 0}
    assert GpuReading.objects.filter(gpu__uuid=T4_UUID).exists()


def test_a_slow_exporter_times_out_and_the_next_good_scrape_resolves_it(exporter, n1_is_the_t4, clock, settings):
    settings.FLEETDECK = {**settings.FLEETDECK, "DCGM_SCRAPE_TIMEOUT_SECONDS": 0.3}
    Node.objects.filter(name="n1").update(exporter_url=f"{exporter}/slow")
    Node.objects.filter(name="n2").update(exporter_url=f"{exporter}/metrics")
    started = time.monotonic()
    outcome = exporters_scrape(now=clock.now)
    assert time.monotonic() - started < 1.5  # the timeout, not the exporter's 2 s, decided
    assert list(outcome.failed) == ["n1"] and "ReadTimeout" in outcome.failed["n1"]
    assert outcome.scraped == ["n2"]  # one slow node does not hold up the others
    failed = HealthEvent.objects.get(kind="scrape_failed")
    assert failed.node.name == "n1" and failed.resolved_at is None and f"{exporter}/slow" in failed.evidence

    Node.objects.filter(name="n1").update(exporter_url=f"{exporter}/metrics")
    assert exporters_scrape(now=clock.now + timedelta(seconds=15)).scraped == ["n1", "n2"]
    failed.refresh_from_db()
    assert failed.resolved_at == clock.now + timedelta(seconds=15)

    Node.objects.filter(name="n1").update(exporter_url=f"{exporter}/slow")
    exporters_scrape(now=clock.now + timedelta(seconds=30))
    failed.refresh_from_db()
    assert failed.resolved_at is None and failed.count == 2  # failing again reopens it


def test_an_oversized_answer_is_refused_without_reading_it_all(exporter, cluster, clock):
    Node.objects.filter(name="n1").update(exporter_url=f"{exporter}/huge")
    outcome = exporters_scrape(now=clock.now)
    assert "larger than 5 MB" in outcome.failed["n1"]
    assert not GpuReading.objects.exists()


def test_an_unreachable_exporter_is_an_event_not_a_crash(cluster, clock):
    Node.objects.filter(name="n1").update(exporter_url="http://127.0.0.1:9/metrics")
    outcome = exporters_scrape(now=clock.now, timeout=httpx.Timeout(1.0))
    assert "ConnectError" in outcome.failed["n1"]
    assert HealthEvent.objects.get(kind="scrape_failed").node.name == "n1"


def test_a_garbage_answer_in_a_batch_fails_only_its_node(exporter, n1_is_the_t4, clock, monkeypatch):
    monkeypatch.setattr(scrape, "BATCH", 2)  # n1 and n2 share a batch, n3 has its own
    Node.objects.filter(name="n1").update(exporter_url=f"{exporter}/metrics")
    Node.objects.filter(name="n2").update(exporter_url=f"{exporter}/garbage")
    Node.objects.filter(name="n3").update(exporter_url=f"{exporter}/metrics")
    outcome = exporters_scrape(now=clock.now)
    assert outcome.scraped == ["n1", "n3"] and list(outcome.failed) == ["n2"]
    assert "No GPU samples found" in outcome.failed["n2"] or "line 1" in outcome.failed["n2"]
    failed = HealthEvent.objects.get(kind="scrape_failed")
    assert failed.node.name == "n2" and failed.resolved_at is None
    assert GpuReading.objects.get(gpu__uuid=T4_UUID).temperature_c == 25
    assert set(Node.objects.filter(last_heartbeat=clock.now).values_list("name", flat=True)) == {"n1", "n3"}

    Node.objects.filter(name="n2").update(exporter_url=f"{exporter}/metrics")
    assert exporters_scrape(now=clock.now + timedelta(seconds=15)).scraped == ["n1", "n2", "n3"]
    failed.refresh_from_db()
    assert failed.resolved_at == clock.now + timedelta(seconds=15)
