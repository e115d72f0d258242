"""Parallax's own Prometheus metrics, plus the latest canonical metrics of each run."""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from parallax.ingest.names import CANONICAL_METRICS
from parallax.ingest.points import nonfinite_value


class RunMetricsCollector(Collector):
    """On each scrape, the latest value of every run's canonical metrics (read from the latest table)."""

    def __init__(self, store: Any, finished_runs_for_s: float | None = None):
        self._store = store
        # A run that is no longer running drops out once its last point is older than this.
        self._finished_runs_for_s = finished_runs_for_s

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "parallax_metric",
            "Latest value of a run's canonical metric",
            labels=["run_id", "project", "run", "metric"],
        )
        step = GaugeMetricFamily(
            "parallax_run_last_step", "Highest step a run reported", labels=["run_id", "project", "run"]
        )
        seen: set[int] = set()
        keep = self._finished_runs_for_s
        for run, lv in self._store.latest_all(CANONICAL_METRICS, ended_since=None if keep is None else time.time() - keep):
            value = lv.value if not lv.nonfinite else nonfinite_value(lv.nonfinite)
            family.add_metric([str(run.id), run.project, run.name, lv.metric], value)
            if run.id not in seen and run.last_step is not None:
                seen.add(run.id)
                step.add_metric([str(run.id), run.project, run.name], run.last_step)
        yield family
        yield step
        alerts = GaugeMetricFamily(
            "parallax_alert",
            "Open alerts (1 per pending or firing alert), as Prometheus exposes ALERTS",
            labels=["run_id", "project", "run", "rule", "severity", "state"],
        )
        for state in ("firing", "pending"):
            for a in self._store.list_alerts(state=state, limit=10_000):
                alerts.add_metric([str(a["run_id"]), a["project"], a["run_name"], a["rule"], a["severity"], state], 1)
        yield alerts


class Telemetry:
    def __init__(self, store: Any, finished_runs_for_s: float | None = None):
        disable_created_metrics()  # the _created series double every counter for no use here
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "parallax_http_requests", "HTTP requests served", ["method", "route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "parallax_http_request_duration_seconds",
            "Time to serve an HTTP request",
            ["method", "route"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.ingest_points = Counter(
            "parallax_ingest_points",
            "Metric points stored by every ingest path: accepted (aliases included), of those aliased (canonical "
            "names of framework keys, kept as links to their points when unchanged), replaced (a different earlier value overwritten) and non_finite",
            ["outcome"],
            registry=self.registry,
        )
        self.remote_write_samples = Counter(
            "parallax_remote_write_samples",
            "Remote-write samples that waited for the step of their timestamp (another shard brought it later), "
            "that were dropped because it never came (unplaced), and series that Prometheus's staleness markers "
            "ended (stale_markers; a marker is never stored)",
            ["outcome"],
            registry=self.registry,
        )
        self.ingest_batches = Counter(
            "parallax_ingest_batches", "Ingest batches by result", ["result"], registry=self.registry
        )
        self.ingest_seconds = Histogram(
            "parallax_ingest_batch_duration_seconds",
            "Time to validate and store one ingest batch",
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.rules_seconds = Histogram(
            "parallax_ingest_rules_duration_seconds",
            "Time the rules take to judge the new steps of one ingest batch (inside the batch's duration)",
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        self.leader = Gauge(
            "parallax_leader",
            "1 when this process is the leader that evaluates rules and notifies (always on SQLite)",
            registry=self.registry,
        )
        self.registry.register(RunMetricsCollector(store, finished_runs_for_s))

    def watch_leader(self, is_leader: Callable[[], bool]) -> None:
        """``parallax_leader`` reads ``is_leader`` at each scrape."""
        self.leader.set_function(lambda: float(is_leader()))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def route_label(scope: dict) -> str:
    """The route template (bounded cardinality), never the raw path."""
    route = scope.get("route")
    if route is not None and getattr(route, "path", None):
        return route.path
    path = scope.get("path", "")
    if path.startswith("/dashboard"):
        return "/dashboard"
    return "unmatched"


class TelemetryMiddleware:
    def __init__(self, app: Callable, telemetry: Telemetry):
        self.app = app
        self.telemetry = telemetry

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = route_label(scope)
            self.telemetry.requests.labels(scope["method"], route, str(status)).inc()
            self.telemetry.latency.labels(scope["method"], route).observe(time.perf_counter() - start)

