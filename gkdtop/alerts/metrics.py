"""`--metrics-port`: the verdict as Prometheus metrics (prometheus-client), for the team's Grafana.

The values are computed on the event loop once a second (`update`) and only handed over whole to the
scrape thread, which never touches the store. Names and labels are listed in docs/alerts.md; text
that comes from a log (a metric's name) goes through the redactor first."""

from __future__ import annotations

import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from gkdtop.actions.redact import redact_text

if TYPE_CHECKING:
    from collections.abc import Iterator

    from gkdtop.model import PhaseStatus
    from gkdtop.store import Store

MAX_SCRAPERS = 16  # connections served at once; more are closed as they open (a scrape takes milliseconds)
REQUEST_TIMEOUT = 10.0  # seconds a connection may take to send its request: half-sent ones are dropped
JOB_METRICS_MAX = 300  # the job's own step metrics exported (verl prints about sixty)
LABEL_CHARS = 120
_UNSAFE = re.compile(r"[^a-zA-Z0-9_]+")


def metric_name(raw: str) -> str:
    """`critic/score/mean` -> `critic_score_mean`: what Prometheus accepts in a name."""
    name = _UNSAFE.sub("_", raw).strip("_").lower()
    return f"_{name}" if name[:1].isdigit() else name


def _label(text: str) -> str:
    """Redacted whole, then cut (a token cut first is one the redactor no longer knows)."""
    return redact_text(text)[0][:LABEL_CHARS]


def _unique(seen: set[str], label: str) -> str:
    """Two values that redact or cut alike would be one series twice (Prometheus keeps one): `#2` on."""
    value, n = label, 1
    while value in seen:
        n += 1
        value = f"{label} #{n}"
    seen.add(value)
    return value


class MetricsExporter:
    """An HTTP endpoint (prometheus-client's own server, a daemon thread) serving the last `update`."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        from prometheus_client import CollectorRegistry

        self._families: list[Any] = []
        self.events: dict[str, int] = {}  # alerts sent, by kind
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self.server = _server(host, port, self.registry)
        threading.Thread(target=self.server.serve_forever, name="metrics", daemon=True).start()
        self.host = host
        self.port: int = self.server.server_address[1]

    @property
    def exposed(self) -> bool:
        """Listening beyond this machine (--metrics-host 0.0.0.0): said when it starts."""
        import ipaddress

        try:
            return not ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:
            return self.host != "localhost"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def describe(self) -> list[Any]:
        return []  # the names vary with the job's metrics: nothing to declare up front

    def collect(self) -> Iterator[Any]:
        return iter(self._families)  # the scrape thread: a list replaced whole, never changed in place

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def update(self, store: Store, status: PhaseStatus) -> None:
        """Build every family from the store (on the loop's thread) and hand them over at once."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        def gauge(name: str, doc: str, value: float | None, **labels: str) -> None:
            if value is None:
                return
            family = GaugeMetricFamily(name, doc, labels=list(labels))
            family.add_metric(list(labels.values()), float(value))
            out.append(family)

        out: list[Any] = []
        stalled = status.state == "stalled"
        gauge("gkdtop_stalled", "1 while the job makes no progress past its phase's stall limit", float(stalled))
        gauge("gkdtop_failed", "1 once the log shows the job failed", float(status.state == "failed"))
        gauge("gkdtop_stalled_seconds", "seconds without progress, while stalled (0 otherwise)",
              status.stalled_for if stalled and status.stalled_for is not None else 0.0)
        gauge("gkdtop_last_progress_timestamp_seconds", "when the log last showed progress (epoch seconds)",
              status.last_progress)
        framework = store.framework()
        gauge("gkdtop_phase_info", "the phase the job is in (labels), always 1", 1.0,
              phase=_label(status.within or status.current or ""), state=status.state,
              framework=_label(framework.name or ""))
        steps = CounterMetricFamily("gkdtop_steps", "training steps the log reported")
        steps.add_metric([], float(status.steps_done))
        out.append(steps)
        gauge("gkdtop_step_seconds", "seconds per training step (timing_s/step, else the steps' spacing)",
              status.step_time)
        last = status.last_step
        if last is not None:
            gauge("gkdtop_last_step", "the last step number the log reported", float(last.step))
            parts = GaugeMetricFamily("gkdtop_step_part_seconds", "seconds of the last step per timing_s/* part",
                                      labels=["part"])
            job = {}
            seen_parts: set[str] = set()
            for key, value in last.metrics.items():
                if key.startswith("timing_s/"):
                    parts.add_metric([_unique(seen_parts, _label(key[len("timing_s/"):]))], value)
                    continue
                name = "gkdtop_job_" + metric_name(key)
                if name not in job and len(job) < JOB_METRICS_MAX and redact_text(key)[0] == key:
                    job[name] = (key, value)
            out.append(parts)
            for name, (key, value) in job.items():
                gauge(name, f"the job's own step metric {key!r}, last step", value)
        findings = GaugeMetricFamily("gkdtop_findings", "lines seen per known failure signature", labels=["finding"])
        seen_findings: set[str] = set()
        for finding in store.findings():
            findings.add_metric([_unique(seen_findings, _label(finding.name))], float(finding.count))
        out.append(findings)
        changed = GaugeMetricFamily("gkdtop_anomaly_since_step", "the step a slow failure began at",
                                    labels=["kind", "metric"])
        # A run's slow failures while it runs, as `watch` tells them: a finished or failed run's are history.
        for anomaly in store.anomalies() if status.state not in ("failed", "done") else ():
            if redact_text(anomaly.metric)[0] == anomaly.metric:
                changed.add_metric([anomaly.kind, _label(anomaly.metric)], float(anomaly.step))
        out.append(changed)
        util = GaugeMetricFamily("gkdtop_gpu_utilization_ratio", "GPU utilisation, 0 to 1", labels=["gpu", "uuid"])
        used = GaugeMetricFamily("gkdtop_gpu_memory_used_bytes", "GPU memory in use", labels=["gpu", "uuid"])
        total = GaugeMetricFamily("gkdtop_gpu_memory_total_bytes", "GPU memory", labels=["gpu", "uuid"])
        for gpu in store.gpus.devices:
            key = [str(gpu.index), gpu.uuid]
            if gpu.utilization is not None:
                util.add_metric(key, gpu.utilization / 100.0)
            if gpu.memory_used is not None:
                used.add_metric(key, float(gpu.memory_used))
            if gpu.memory_total is not None:
                total.add_metric(key, float(gpu.memory_total))
        out += [util, used, total]
        if store.ray.status == "connected":
            gauge("gkdtop_ray_pending_demands", "resource demands Ray cannot place yet", float(len(store.ray.pending)))
            gauge("gkdtop_ray_nodes_dead", "Ray nodes marked dead", float(store.ray.nodes_dead))
        sent = CounterMetricFamily("gkdtop_alerts", "events told (stalled, failed, recovered, ...)", labels=["event"])
        for kind, count in sorted(self.events.items()):
            sent.add_metric([kind], float(count))
        out.append(sent)
        self._families = out


class _MetricsHandler(BaseHTTPRequestHandler):
    timeout = REQUEST_TIMEOUT  # the socket's: a request never finished is dropped, not waited on forever

    def do_GET(self) -> None:
        from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

        if self.path.split("?", 1)[0] not in ("/metrics", "/"):
            self.send_error(404)
            return
        body = generate_latest(self.server.registry)  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE_LATEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape every 15 s is not news


class _MetricsServer(ThreadingHTTPServer):
    """prometheus-client's own server has no header timeout and no cap: 300 half-sent requests held 300
    threads. This one drops a connection after REQUEST_TIMEOUT and serves MAX_SCRAPERS at once."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], registry: Any, family: int) -> None:
        self.address_family = family
        self.registry = registry
        self.slots = threading.BoundedSemaphore(MAX_SCRAPERS)
        super().__init__(address, _MetricsHandler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)  # full: closed at once, the scraper retries on its next interval
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self.slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


def _server(host: str, port: int, registry: Any) -> _MetricsServer:
    """Bound to `host` (an IPv6 address in brackets or not), raising OSError as bind does."""
    bare = host.strip("[]")
    return _MetricsServer((bare, port), registry, socket.AF_INET6 if ":" in bare else socket.AF_INET)
