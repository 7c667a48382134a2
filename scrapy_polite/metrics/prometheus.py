"""Optional Prometheus exposition (``pip install scrapy-polite[prometheus]``).

Off unless ``POLITE_PROMETHEUS_PORT`` is set; binds 127.0.0.1 by default so
metrics are not exposed beyond the machine without a deliberate choice.
Port 0 picks a free port (see :attr:`PrometheusExporter.url`). Host and
endpoint labels arrive already capped by :class:`~scrapy_polite.metrics.stats.PoliteStats`,
so label cardinality stays bounded.
"""

from __future__ import annotations

from typing import Any

from scrapy_polite.metrics.outcome import Outcome

_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, float("inf"))


class PrometheusExporter:
    """Metrics in their own registry, served from a daemon thread until :meth:`close`."""

    def __init__(self, address: str, port: int) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
        except ImportError as exc:  # pragma: no cover - depends on the extra
            raise RuntimeError(
                "POLITE_PROMETHEUS_PORT needs prometheus-client: pip install 'scrapy-polite[prometheus]'"
            ) from exc
        self.registry = CollectorRegistry()
        reg = self.registry
        self.requests = Counter(
            "polite_requests", "Request attempts by host, endpoint and status (or exception class)",
            ["host", "endpoint", "status"], registry=reg,
        )
        self.success = Counter("polite_success", "Successful pages by host", ["host"], registry=reg)
        self.rate_limited = Counter(
            "polite_rate_limited", "Rate-limit answers (429 and alike) by host and endpoint",
            ["host", "endpoint"], registry=reg,
        )
        self.latency = Histogram(
            "polite_download_latency_seconds", "Download latency by host", ["host"], registry=reg,
        )
        self.wait = Histogram(
            "polite_gate_wait_seconds", "Time a request waited at the gates, by host", ["host"],
            buckets=_WAIT_BUCKETS, registry=reg,
        )
        self.exit_ips = Gauge("polite_exit_ips", "Distinct exit IPs seen, by host", ["host"], registry=reg)
        self.pages_per_min = Gauge(
            "polite_pages_per_minute", "Successful pages per minute (span: window or run)", ["span"],
            registry=reg,
        )
        result: Any = start_http_server(port, addr=address, registry=reg)
        # prometheus-client >= 0.17 returns (server, thread); older ones None.
        self.server, self.thread = result if isinstance(result, tuple) else (None, None)
        bound = self.server.server_address if self.server is not None else (address, port)
        self.address, self.port = str(bound[0]), int(bound[1])

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}/metrics"

    def observe(
        self, outcome: Outcome, status: str, host: str | None = None, endpoint: str | None = None,
        exit_ips: int | None = None,
    ) -> None:
        host = host or outcome.host
        endpoint = endpoint or outcome.endpoint or "-"
        self.requests.labels(host, endpoint, status).inc()
        if outcome.success:
            self.success.labels(host).inc()
        if outcome.rate_limited:
            self.rate_limited.labels(host, endpoint).inc()
        if outcome.latency is not None:
            self.latency.labels(host).observe(outcome.latency)
        if outcome.endpoint:
            self.wait.labels(host).observe(outcome.wait)
        if exit_ips is not None:
            self.exit_ips.labels(host).set(exit_ips)

    def set_rates(self, window: float, overall: float) -> None:
        self.pages_per_min.labels("window").set(window)
        self.pages_per_min.labels("run").set(overall)

    def close(self) -> None:
        """Stop serving and free the port, so a next crawl in the process can bind it."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        if self.thread is not None:
            self.thread.join(timeout=5)
            self.thread = None
