"""Optional Prometheus exposition (``pip install scrapy-polite[prometheus]``).

Off unless ``POLITE_PROMETHEUS_PORT`` is set; binds 127.0.0.1 by default so
metrics are not exposed beyond the machine without a deliberate choice.
"""

from __future__ import annotations

from typing import Any

from .outcome import Outcome


class PrometheusExporter:
    def __init__(self, address: str, port: int) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
        except ImportError as exc:  # pragma: no cover - depends on the extra
            raise RuntimeError(
                "POLITE_PROMETHEUS_PORT needs prometheus-client: pip install 'scrapy-polite[prometheus]'"
            ) from exc
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "polite_requests", "Request attempts by host, endpoint and status",
            ["host", "endpoint", "status"], registry=self.registry,
        )
        self.latency = Histogram(
            "polite_download_latency_seconds", "Download latency by host", ["host"],
            registry=self.registry,
        )
        self.server: Any = start_http_server(port, addr=address, registry=self.registry)

    def observe(self, outcome: Outcome, status: str) -> None:
        self.requests.labels(outcome.host, outcome.endpoint or "-", status).inc()
        if outcome.latency is not None:
            self.latency.labels(outcome.host).observe(outcome.latency)
