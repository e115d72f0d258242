"""Prometheus ingest benchmark, called by bench.run (``make bench``); also ``python -m bench.prom``.

Against its own ``parallax serve`` (SQLite file in a temporary folder):

(e) Pushgateway: pushes/s of ``prometheus_client.push_to_gateway`` with 50
    gauges (+ the step gauge) each, one push per step, as a trainer would;
(f) remote write: samples/s of snappy-compressed WriteRequests of 50 series x
    40 scrapes (2,000 samples, plus the 40 of the ``step`` series, which are not
    counted), against JSON ingest of the same 2,000 points per POST (50 metrics
    x 40 steps) in the same server; target: remote write >= 50% of JSON.
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.exposition import push_to_gateway

from parallax.ingest import remote_write as rw

# bench.run's helpers; measure() rebinds them to the module that calls it, so that under
# `python -m bench.run` (module __main__) its BenchError is the one its main() catches.
from bench import run as _run

Api, BenchError, log, running_server = _run.Api, _run.BenchError, _run.log, _run.running_server

GAUGES = 50
PUSHES = 300
PUSHES_QUICK = 100
SERIES = 50
SCRAPES_PER_REQUEST = 40
REQUESTS = 50
REQUESTS_QUICK = 20
REPEATS = 3
SCRAPE_MS = 15_000
TARGET_RATIO = 0.5
WRITE_HEADERS = {"content-type": "application/x-protobuf", "content-encoding": "snappy", "x-prometheus-remote-write-version": "0.1.0"}


def measure_pushgateway(url: str, pushes: int) -> dict:
    reg = CollectorRegistry()
    step = Gauge("step", "training step", registry=reg)
    gauges = [Gauge(f"metric_{i}", "a trainer gauge", registry=reg) for i in range(GAUGES)]
    rng = random.Random(5)
    gateway = url.removeprefix("http://")
    push_to_gateway(gateway, job="bench-push", registry=reg, grouping_key={"run": "warmup"})
    start = time.perf_counter()
    for s in range(pushes):
        step.set(s)
        for g in gauges:
            g.set(rng.random())
        push_to_gateway(gateway, job="bench-push", registry=reg, grouping_key={"run": "timed"})
    seconds = time.perf_counter() - start
    rate = pushes / seconds
    log(f"Pushgateway: {rate:,.0f} pushes/s of {GAUGES} gauges ({pushes} pushes in {seconds:.2f}s, {rate * GAUGES:,.0f} samples/s)")
    return {"pushes": pushes, "gauges_per_push": GAUGES, "seconds": seconds, "pushes_per_s": rate, "samples_per_s": rate * GAUGES}


def remote_write_bodies(run: str, requests: int, t0: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    bodies = []
    for r in range(requests):
        stamps = [t0 + (r * SCRAPES_PER_REQUEST + j) * SCRAPE_MS for j in range(SCRAPES_PER_REQUEST)]
        steps = [r * SCRAPES_PER_REQUEST + j for j in range(SCRAPES_PER_REQUEST)]
        ident = {"run": run, "project": "bench-rw", "job": "trainer", "instance": "10.0.0.5:8000"}
        series = [({"__name__": "step", **ident}, [(float(s), t) for s, t in zip(steps, stamps)])]
        series += [({"__name__": f"metric_{i}", **ident}, [(rng.random(), t) for t in stamps]) for i in range(SERIES)]
        bodies.append(rw.encode(series))
    return bodies


def json_bodies(requests: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [
        orjson.dumps({"points": [
            {"step": r * SCRAPES_PER_REQUEST + j, "metrics": {f"metric_{i}": rng.random() for i in range(SERIES)}}
            for j in range(SCRAPES_PER_REQUEST)
        ]})
        for r in range(requests)
    ]


def _timed_posts(client: httpx.Client, path: str, bodies: list[bytes], headers: dict, expect: int) -> float:
    start = time.perf_counter()
    for b in bodies:
        r = client.post(path, content=b, headers=headers)
        if r.status_code != 200:
            raise BenchError(f"POST {path}: {r.status_code} {r.text[:300]}")
        if r.json()["accepted"] < expect:
            raise BenchError(f"POST {path}: accepted {r.json()['accepted']}, expected {expect}")
    return time.perf_counter() - start


def measure_remote_write(url: str, requests: int, repeats: int) -> dict:
    per_request = SERIES * SCRAPES_PER_REQUEST
    t0 = int(time.time() * 1000) - requests * SCRAPES_PER_REQUEST * SCRAPE_MS * (repeats + 1) - 3_600_000
    rw_rates, json_rates = [], []
    with Api(url) as api, httpx.Client(base_url=url, timeout=300.0) as client:
        # Warm both paths (metric keys, code) in throw-away runs.
        client.post("/api/v1/prom/write", content=remote_write_bodies("warmup", 1, t0, 0)[0], headers=WRITE_HEADERS)
        warm = api.create_run(f"json-warmup-{time.time_ns()}")
        client.post(f"/api/v1/runs/{warm}/metrics", content=json_bodies(1, 0)[0], headers={"content-type": "application/json"})
        for rep in range(repeats):
            bodies = remote_write_bodies(f"rw-{rep}", requests, t0, rep + 1)
            seconds = _timed_posts(client, "/api/v1/prom/write", bodies, WRITE_HEADERS, per_request)
            rw_rates.append(requests * per_request / seconds)
            run_id = api.create_run(f"json-{rep}-{time.time_ns()}")
            jb = json_bodies(requests, rep + 1)
            seconds = _timed_posts(client, f"/api/v1/runs/{run_id}/metrics", jb, {"content-type": "application/json"}, per_request)
            json_rates.append(requests * per_request / seconds)
            log(f"remote write {rw_rates[-1]:,.0f} samples/s vs JSON {json_rates[-1]:,.0f} points/s ({per_request:,} per request)")
    rw_rate, json_rate = statistics.median(rw_rates), statistics.median(json_rates)
    return {
        "requests": requests, "samples_per_request": per_request, "repeats": repeats,
        "remote_write_samples_per_s": rw_rate, "json_points_per_s": json_rate, "ratio": rw_rate / json_rate,
        "samples_remote_write": rw_rates, "samples_json": json_rates,
    }


def measure(quick: bool = False, lib: object = None) -> dict:
    """Both measures against a fresh server; the document bench.run puts under "prometheus"."""
    global Api, BenchError, log, running_server
    if lib is not None:
        Api, BenchError, log, running_server = lib.Api, lib.BenchError, lib.log, lib.running_server
    with tempfile.TemporaryDirectory(prefix="parallax-bench-prom-") as tmp:
        with running_server(Path(tmp)) as server:
            log(f"(e) Pushgateway: prometheus_client pushes of {GAUGES} gauges")
            push = measure_pushgateway(server.url, PUSHES_QUICK if quick else PUSHES)
            log(f"(f) remote write vs JSON ingest: {SERIES} series x {SCRAPES_PER_REQUEST} scrapes per request")
            write = measure_remote_write(server.url, REQUESTS_QUICK if quick else REQUESTS, 1 if quick else REPEATS)
    return {"pushgateway": push, "remote_write": write, "target_ratio_min": TARGET_RATIO, "met": write["ratio"] >= TARGET_RATIO}


def rows(doc: dict, Row: type) -> list:
    """Lines for bench.run's table."""
    p, w = doc["pushgateway"], doc["remote_write"]
    return [
        Row(f"Pushgateway push, {p['gauges_per_push']} gauges", f"{p['pushes_per_s']:,.0f} pushes/s", f"{p['samples_per_s']:,.0f} samples/s"),
        Row("remote write", f"{w['remote_write_samples_per_s']:,.0f} samples/s", f"{w['json_points_per_s']:,.0f} pts/s JSON",
            f"{w['ratio']:.3f}", f"ratio ≥ {doc['target_ratio_min']}", doc["met"]),
    ]


if __name__ == "__main__":
    out = measure(quick="--quick" in sys.argv)
    print(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode())
