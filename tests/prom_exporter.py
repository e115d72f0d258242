"""A trainer's prometheus_client exporter, for the tests and the soak that run a real Prometheus.

    python -m tests.prom_exporter --port P --steps N [--metrics M] [--run r1 --run r2 ...] [--finish] ...

Each scrape of ``/metrics`` is one training step: the first scrape sees step
``--first-step``, the next one step + 1, and so on up to the last step (``--steps``
steps in all), which later scrapes see again unchanged. A scrape reads one
consistent snapshot (a collector under a lock), so every series of a scrape
is of the same step, as a trainer that sets its gauges between steps.

Series (for each ``--run``, labelled ``run="<name>"``; without ``--run`` none,
and the run comes from the scrape's target labels): the step gauge (``step``,
or ``--step-name``; ``none`` for none), ``entropy``, ``kl``, ``loss``,
``metric_3`` ... (``--metrics`` of them), ``pass_at_k{k="8"}`` and
``pass_at_k{k="16"}`` with ``--pass-at-k``, ``step_s`` with ``--step-s``, and with ``--finish`` the
``parallax_run_finished`` gauge: 0, then 1 from the last step on. Values are
``value_of(run index, metric index, step)``, so a checker knows every one.

``GET /healthz`` answers without moving the step. The process exits when its
stdin closes (the test's way to stop a trainer), or on SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from socketserver import ThreadingMixIn
from typing import Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

NAMES = ("entropy", "kl", "loss")
FINISHED = "parallax_run_finished"


def metric_name(j: int) -> str:
    return NAMES[j] if j < len(NAMES) else f"metric_{j}"


def value_of(run: int, metric: int, step: int) -> float:
    """The value of metric ``metric`` of the ``run``-th run at ``step`` (exact in binary: a multiple of 1/1024)."""
    return ((run * 7919 + metric * 104_729 + step * 613) % 4096) / 1024.0 + metric


def pass_at_k_of(run: int, k: int, step: int) -> float:
    return ((run * 31 + k * 17 + step * 7) % 1024) / 1024.0


class TrainerCollector(Collector):
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.scrapes = 0
        self.lock = threading.Lock()

    def collect(self) -> Iterable[GaugeMetricFamily]:
        a = self.args
        with self.lock:
            step = a.first_step + min(self.scrapes, a.steps - 1)
            self.scrapes += 1
        runs = a.run or [None]
        label = ["run"] if a.run else []
        families: dict[str, GaugeMetricFamily] = {}

        def add(name: str, extra: dict[str, str], i: int, run: str | None, value: float) -> None:
            keys = label + sorted(extra)
            fam = families.get(name)
            if fam is None:
                fam = families[name] = GaugeMetricFamily(name, f"trainer gauge {name}", labels=keys)
            fam.add_metric(([run] if run is not None else []) + [extra[k] for k in sorted(extra)], value)

        for i, run in enumerate(runs):
            idx = a.run_index + i
            if a.step_name != "none":
                add(a.step_name, {}, idx, run, float(step))
            for j in range(a.metrics):
                add(metric_name(j), {}, idx, run, value_of(idx, j, step))
            if a.pass_at_k:
                for k in (8, 16):
                    add("pass_at_k", {"k": str(k)}, idx, run, pass_at_k_of(idx, k, step))
            if a.step_s is not None:
                add("step_s", {}, idx, run, a.step_s)
            if a.finish:
                add(FINISHED, {}, idx, run, 1.0 if step == a.first_step + a.steps - 1 else 0.0)
        return list(families.values())


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        pass


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.prom_exporter", description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--steps", type=int, required=True, help="steps in all; the last one is held")
    p.add_argument("--first-step", type=int, default=0)
    p.add_argument("--metrics", type=int, default=3)
    p.add_argument("--run", action="append", help="a run label (repeatable); none: the target labels give the run")
    p.add_argument("--run-index", type=int, default=0, help="index of the first run in value_of")
    p.add_argument("--step-name", default="step", help="step, global_step, or none")
    p.add_argument("--pass-at-k", action="store_true")
    p.add_argument("--finish", action="store_true", help=f"export {FINISHED}: 1 from the last step on")
    p.add_argument("--step-s", type=float, help="export step_s (seconds a step takes) with this value")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TrainerCollector(args))
    metrics_app = make_wsgi_app(registry)

    def app(environ, start_response):
        if environ.get("PATH_INFO") == "/healthz":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok\n"]
        return metrics_app(environ, start_response)

    server = make_server("127.0.0.1", args.port, app, server_class=_Server, handler_class=_QuietHandler)
    stop = threading.Event()

    def until_stdin_closes() -> None:
        try:
            while sys.stdin.buffer.read(4096):
                pass
        finally:
            stop.set()

    threading.Thread(target=until_stdin_closes, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stop.wait()
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
