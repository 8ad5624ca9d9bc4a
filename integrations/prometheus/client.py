"""A small client of Prometheus's HTTP query API (/api/v1/query, /api/v1/query_range).

Every request has a hard timeout (connect and read), so a slow or hung Prometheus costs a page at
most PROMETHEUS_TIMEOUT_SECONDS and never a worker. Anything that is not a successful answer (no
connection, a timeout, an HTTP error, Prometheus's own error JSON, a body that is not its JSON) is a
PrometheusUnavailable naming what went wrong; callers turn it into a "source unavailable" notice."""
from __future__ import annotations

import ssl
import time
from dataclasses import dataclass
from datetime import datetime

import httpx
from django.conf import settings

from health.telemetry import TelemetryUnavailable

# Answers are JSON of at most this many bytes (10,000 GPUs' vector is about 2 MB).
MAX_BYTES = 64 * 1024 * 1024
# After a failure, queries fail at once for this long: a page asks several questions, and a hung
# Prometheus must cost a worker one timeout every so often, not one per question.
RETRY_AFTER_SECONDS = 10.0


class PrometheusUnavailable(TelemetryUnavailable):
    """Prometheus did not answer the query, or answered with an error."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One series of an instant vector: its labels and value."""

    labels: dict[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Series:
    """One series of a range query: its labels and (unix time, value) points."""

    labels: dict[str, str]
    points: list[tuple[float, float]]


@dataclass
class PrometheusClient:
    url: str
    timeout: float = 5.0
    bearer_token: str = ""
    username: str = ""
    password: str = ""
    ca_file: str = ""
    transport: httpx.BaseTransport | None = None
    # Queries sent so far: tests and the benchmark count a page's (constant in fleet size).
    queries: int = 0

    @classmethod
    def from_settings(cls) -> PrometheusClient:
        conf = settings.FLEETDECK
        return cls(
            url=conf["PROMETHEUS_URL"], timeout=float(conf.get("PROMETHEUS_TIMEOUT_SECONDS", 5)),
            bearer_token=conf.get("PROMETHEUS_BEARER_TOKEN", ""), username=conf.get("PROMETHEUS_USERNAME", ""),
            password=conf.get("PROMETHEUS_PASSWORD", ""), ca_file=conf.get("PROMETHEUS_CA_FILE", ""),
        )

    def __post_init__(self) -> None:
        self._http: httpx.Client | None = None
        self._failed: tuple[float, str] | None = None  # (monotonic time, what went wrong)

    def _client(self) -> httpx.Client:
        # One pooled client for the process's lifetime: building one loads the CA bundle (tens of ms),
        # and keep-alive spares each page a TCP handshake. httpx.Client is safe to share across threads.
        if self._http is None:
            self._http = self._build()
        return self._http

    def _build(self) -> httpx.Client:
        headers = {"Accept": "application/json"}
        if self.bearer_token:
            headers["Authorization"] = f"Bearer {self.bearer_token}"
        auth = httpx.BasicAuth(self.username, self.password) if self.username else None
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else True
        return httpx.Client(
            base_url=self.url.rstrip("/"), headers=headers, auth=auth, verify=verify, transport=self.transport,
            timeout=httpx.Timeout(self.timeout, connect=min(2.0, self.timeout)), follow_redirects=False,
        )

    def _get(self, path: str, params: dict[str, str]) -> dict:
        failed = self._failed
        if failed is not None and time.monotonic() - failed[0] < RETRY_AFTER_SECONDS:
            raise PrometheusUnavailable(failed[1])
        self.queries += 1
        try:
            data = self._send(path, params)
        except PrometheusUnavailable as exc:
            self._failed = (time.monotonic(), str(exc))
            raise
        self._failed = None
        return data

    def _send(self, path: str, params: dict[str, str]) -> dict:
        try:
            # POST: a query naming many series may be longer than a URL may be.
            response = self._client().post(path, data=params)
        except httpx.TimeoutException as exc:
            raise PrometheusUnavailable(f"{self.url} did not answer within {self.timeout:g} s") from exc
        except httpx.HTTPError as exc:
            raise PrometheusUnavailable(f"{self.url}: {type(exc).__name__}: {exc}") from exc
        if len(response.content) > MAX_BYTES:
            raise PrometheusUnavailable(f"{self.url}: answer larger than {MAX_BYTES // (1024 * 1024)} MB")
        try:
            body = response.json()
        except ValueError:
            status = response.status_code
            raise PrometheusUnavailable(f"{self.url} answered HTTP {status}, not Prometheus JSON") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error", "") if isinstance(body, dict) else ""
            raise PrometheusUnavailable(f"{self.url} answered HTTP {response.status_code}: {error or 'no result'}")
        return body.get("data") or {}

    def query(self, expr: str, *, at: datetime | None = None) -> list[Sample]:
        """An instant query; a result that is not a vector is an error (the queries here all ask for one)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at.timestamp():.3f}"
        data = self._get("/api/v1/query", params)
        if data.get("resultType") != "vector":
            raise PrometheusUnavailable(f"expected a vector from {expr!r}, got {data.get('resultType')!r}")
        return [Sample(item["metric"], _number(item["value"][1])) for item in data.get("result", [])]

    def query_range(self, expr: str, *, start: datetime, end: datetime, step_seconds: int) -> list[Series]:
        params = {"query": expr, "start": f"{start.timestamp():.3f}", "end": f"{end.timestamp():.3f}",
                  "step": str(step_seconds)}
        data = self._get("/api/v1/query_range", params)
        if data.get("resultType") != "matrix":
            raise PrometheusUnavailable(f"expected a matrix from {expr!r}, got {data.get('resultType')!r}")
        return [Series(item["metric"], [(float(t), _number(v)) for t, v in item.get("values", [])])
                for item in data.get("result", [])]


def _number(text: str) -> float:
    return float(text)  # Prometheus sends "NaN", "+Inf" as text; float() reads them
