"""The real Prometheus and Alertmanager (Debian's packages) on loopback ports, scraping simulated
dcgm-exporters, for one test each (a fresh TSDB and a fresh Alertmanager: nothing leaks between tests).

An exporter serves real captured dcgm-exporter text (the complete T4 dump under
/work/shared/telemetry/dcgm/, read where it lies) once per GPU of its node, with the labels naming
the node's GPUs and the values a test sets (utilisation, memory, the last Xid), so the values vary
over a test. Prometheus scrapes the exporters and Fleetdeck's /metrics every second and evaluates
the shipped rules every second; Alertmanager runs the shipped route and receiver with short timers
and posts to Fleetdeck's webhook on the live server."""
from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import yaml

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "integrations" / "prometheus" / "rules" / "fleetdeck-rules.yml"
AM_SNIPPET = REPO / "integrations" / "prometheus" / "alertmanager-fleetdeck.yml"
TEMPLATE = "telemetry/dcgm/t4_driver460_datadog-integrations-core.prom"
# The captured GPU's identity in the dump, replaced by each simulated GPU's.
_CAPTURED = {"gpu": "0", "UUID": "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e", "Hostname": "424773df46e0",
             "device": "nvidia0"}
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)\{(?P<labels>.*)\} (?P<value>\S+)$")
# Which values a test sets, by metric.
_VALUES = {"DCGM_FI_DEV_GPU_UTIL": "util", "DCGM_FI_DEV_FB_USED": "fb_used", "DCGM_FI_DEV_XID_ERRORS": "xid"}


def wait_for(check: Callable[[], object], *, timeout: float = 30, what: str = "") -> object:
    """Poll until check() returns something true; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (httpx.HTTPError, AssertionError, KeyError) as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what or check}: last {last!r}")


@dataclass
class GpuValues:
    util: float = 0.0  # DCGM_FI_DEV_GPU_UTIL, %
    fb_used: float = 0.0  # MiB
    xid: int = 0
    # Labels to add or replace on the GPU's every series ("" drops one): what dcgm-exporter's
    # Kubernetes pod mapping adds (pod, namespace, container), or a UUID it did not report.
    labels: dict[str, str] = field(default_factory=dict)


class Template:
    """The captured dump as (HELP/TYPE lines, one sample line) per metric family."""

    def __init__(self, text: str) -> None:
        self.families: list[tuple[list[str], str]] = []
        comments: list[str] = []
        for line in text.splitlines():
            if line.startswith("#"):
                comments.append(line)
            elif line.strip():
                self.families.append((comments, line))
                comments = []

    def render(self, node: str, gpus: list[tuple[int, str, GpuValues]]) -> str:
        out: list[str] = []
        for comments, sample in self.families:
            out += comments
            match = _SAMPLE.match(sample)
            assert match, sample
            name = match["name"]
            for index, uuid, values in gpus:
                labels = match["labels"]
                for label, new in (("gpu", str(index)), ("UUID", uuid), ("Hostname", node),
                                   ("device", f"nvidia{index}")):
                    labels = labels.replace(f'{label}="{_CAPTURED[label]}"', f'{label}="{new}"')
                if values.labels:
                    pairs = dict(_LABEL.findall(labels)) | values.labels
                    labels = ",".join(f'{k}="{v}"' for k, v in pairs.items() if v)
                value = match["value"]
                if name in _VALUES:
                    value = f"{getattr(values, _VALUES[name]):g}"
                out.append(f"{name}{{{labels}}} {value}")
        return "\n".join(out) + "\n"


class Exporter:
    """One node's simulated dcgm-exporter on 127.0.0.1:<port>/metrics."""

    def __init__(self, template: Template, node: str, gpus: list[tuple[int, str]]) -> None:
        self.node = node
        self.values = {index: GpuValues() for index, _uuid in gpus}
        self.uuids = dict(gpus)
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = template.render(exporter.node, [(i, exporter.uuids[i], v) for i, v in exporter.values.items()])
                data = body.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _start(args: list[str], log: Path, ready_url: str) -> subprocess.Popen:
    handle = log.open("ab")
    process = subprocess.Popen(args, stdout=handle, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: process.poll() is None and httpx.get(ready_url, timeout=1).status_code == 200,
                 timeout=30, what=f"{args[0]} at {ready_url} (log: {log})")
    except AssertionError:
        process.kill()
        raise AssertionError(f"{args[0]} did not start: {log.read_text()[-3000:]}") from None
    return process


def _stop(process: subprocess.Popen | None) -> None:
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def binaries() -> dict[str, str] | None:
    """The programs, by their Debian names (Debian ships Alertmanager as prometheus-alertmanager)."""
    found = {"prometheus": shutil.which("prometheus"), "promtool": shutil.which("promtool"),
             "alertmanager": shutil.which("prometheus-alertmanager") or shutil.which("alertmanager"),
             "amtool": shutil.which("amtool")}
    return found if all(found.values()) else None  # type: ignore[return-value]


@dataclass
class Stack:
    """Prometheus + Alertmanager + one exporter per node, for one test."""

    workdir: Path
    ports: Callable[[], int]
    fleetdeck_url: str
    webhook_token: str
    exporters: dict[str, Exporter] = field(default_factory=dict)
    prometheus: subprocess.Popen | None = None
    alertmanager: subprocess.Popen | None = None
    prometheus_port: int = 0
    alertmanager_port: int = 0

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    @property
    def alertmanager_url(self) -> str:
        return f"http://127.0.0.1:{self.alertmanager_port}"

    def add_exporters(self, template: Template, gpus_by_node: dict[str, list[tuple[int, str]]]) -> None:
        for node, gpus in gpus_by_node.items():
            self.exporters[node] = Exporter(template, node, gpus)

    def set(self, node: str, index: int, **values) -> None:
        for name, value in values.items():
            setattr(self.exporters[node].values[index], name, value)

    def _prometheus_config(self) -> Path:
        host = self.fleetdeck_url.split("://", 1)[1]
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{self.alertmanager_port}"]}]}]},
            "scrape_configs": [
                {"job_name": "dcgm", "static_configs": [
                    {"targets": [f"127.0.0.1:{e.port}"], "labels": {"node": name}} for name, e in self.exporters.items()
                ]},
                {"job_name": "fleetdeck", "metrics_path": "/metrics", "static_configs": [{"targets": [host]}]},
            ],
        }
        path = self.workdir / "prometheus.yml"
        path.write_text(yaml.safe_dump(config))
        return path

    def _alertmanager_config(self) -> Path:
        """The shipped snippet, pointed at the live server, with timers in seconds."""
        config = yaml.safe_load(AM_SNIPPET.read_text())
        token = self.workdir / "webhook-token"
        token.write_text(self.webhook_token)
        config["route"] |= {"group_wait": "0s", "group_interval": "1s", "repeat_interval": "1h"}
        config["route"]["routes"][0] |= {"group_interval": "1s"}
        fleetdeck = next(r for r in config["receivers"] if r["name"] == "fleetdeck")
        hook = fleetdeck["webhook_configs"][0]
        hook["url"] = f"{self.fleetdeck_url}/api/v1/alertmanager/webhook/"
        hook["http_config"]["authorization"]["credentials_file"] = str(token)
        path = self.workdir / "alertmanager.yml"
        path.write_text(yaml.safe_dump(config))
        return path

    def start_alertmanager(self) -> None:
        self.alertmanager_port = self.alertmanager_port or self.ports()
        self.alertmanager = _start(
            [binaries()["alertmanager"], f"--config.file={self._alertmanager_config()}",
             f"--storage.path={self.workdir / 'alertmanager-data'}",
             f"--web.listen-address=127.0.0.1:{self.alertmanager_port}", "--cluster.listen-address=",
             "--log.level=warn"],
            self.workdir / "alertmanager.log", f"{self.alertmanager_url}/-/ready")

    def start_prometheus(self) -> None:
        self.prometheus_port = self.prometheus_port or self.ports()
        self.prometheus = _start(
            ["prometheus", f"--config.file={self._prometheus_config()}",
             f"--storage.tsdb.path={self.workdir / 'prometheus-data'}",
             f"--web.listen-address=127.0.0.1:{self.prometheus_port}", "--log.level=warn"],
            self.workdir / "prometheus.log", f"{self.prometheus_url}/-/ready")

    def stop_prometheus(self) -> None:
        _stop(self.prometheus)
        self.prometheus = None

    def query(self, expr: str) -> list[dict]:
        body = httpx.post(f"{self.prometheus_url}/api/v1/query", data={"query": expr}, timeout=5).json()
        assert body["status"] == "success", body
        return body["data"]["result"]

    def alerts(self, alertname: str) -> list[dict]:
        """Alertmanager's active alerts of that name (its API v2)."""
        response = httpx.get(f"{self.alertmanager_url}/api/v2/alerts",
                             params={"filter": f'alertname="{alertname}"'}, timeout=5)
        response.raise_for_status()
        return response.json()

    def close(self) -> None:
        self.stop_prometheus()
        _stop(self.alertmanager)
        for exporter in self.exporters.values():
            exporter.stop()
