"""Trainer client benchmark, called by bench.run (``make bench``); also ``python -m bench.client [--quick]``.

Against its own ``parallax serve`` (SQLite file in a temporary folder):

(h) per-call overhead of ``ParallaxClient.log`` for a 20-metric dict, median
    and p99 in µs, while the client's sender thread is sending to the server
    (rounds of calls with pauses between them, as a training loop would);
    target: median <= 20 µs;
(i) end-to-end points/s through the client: a loop logs 20-metric steps as
    fast as it can, then ``flush()``; points (metric values) acknowledged by the
    server per second from the first ``log`` to the end of the flush, with a
    memory bound that holds them all; and the replay of the same points from
    the disk spool (written while the server was unreachable) by a restarted
    client; both against posting the same points as ready-made JSON bodies
    with httpx.
"""

from __future__ import annotations

import json
import random
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from parallax.client import ParallaxClient

from bench import run as _run

BenchError, log, running_server = _run.BenchError, _run.log, _run.running_server

METRICS = tuple(f"actor/m{i}" for i in range(20))
ROUNDS, CALLS_PER_ROUND = 20, 5_000
ROUNDS_QUICK = 5
E2E_STEPS, E2E_STEPS_QUICK = 50_000, 10_000
BATCH_VALUES = 5_000
TARGET_LOG_MEDIAN_US = 20.0


def _pct(sorted_samples: list[float], q: float) -> float:
    return sorted_samples[min(len(sorted_samples) - 1, int(q * len(sorted_samples)))]


def measure_overhead(url: str, rounds: int, spool: Path) -> dict:
    rng = random.Random(7)
    times: list[float] = []
    clock = time.perf_counter_ns
    with ParallaxClient(url, "bench-client", f"overhead-{time.time_ns()}", spool_dir=spool) as px:
        step = 0
        for _ in range(rounds):
            values = [{m: rng.random() for m in METRICS} for _ in range(CALLS_PER_ROUND)]
            for d in values:
                t0 = clock()
                px.log(d, step)
                times.append(clock() - t0)
                step += 1
            # The "training step": the sender catches up. 5,000 calls in a row is far more than a trainer logs per
            # step; without this pause the queue outgrows its bounds and the client drops (by design, never blocking).
            if not px.flush(60):
                raise BenchError(f"client overhead: the sender did not catch up: {px.stats()}")
        if not px.flush(120):
            raise BenchError(f"client overhead: flush did not finish: {px.stats()}")
        st = px.stats()
    if st["sent"] != step * len(METRICS) or st["dropped"]:
        raise BenchError(f"client overhead: expected {step * len(METRICS)} points sent, got {st}")
    us = sorted(t / 1000 for t in times)
    out = {"calls": len(us), "metrics_per_call": len(METRICS), "median_us": statistics.median(us), "p99_us": _pct(us, 0.99),
           "p999_us": _pct(us, 0.999), "max_us": us[-1]}
    log(f"log() overhead: median {out['median_us']:.2f} µs, p99 {out['p99_us']:.2f} µs over {len(us):,} calls of {len(METRICS)} metrics")
    return out


def _through_client(url: str, steps: int, values: list[dict], spool: Path) -> dict:
    """Points/s from the first log() to the end of flush(), with a memory bound that holds them all."""
    total = steps * len(METRICS)
    with ParallaxClient(url, "bench-client", f"e2e-{time.time_ns()}", spool_dir=spool, max_queue_values=2 * total,
                        batch_values=BATCH_VALUES) as px:
        start = time.perf_counter()
        for s in range(steps):
            px.log(values[s % 1000], s)
        logged = time.perf_counter() - start
        if not px.flush(300):
            raise BenchError(f"client end-to-end: flush did not finish: {px.stats()}")
        seconds = time.perf_counter() - start
        st = px.stats()
    if st["sent"] != total or st["dropped"] or st["spilled"]:
        raise BenchError(f"client end-to-end: expected {total} points sent from memory, got {st}")
    return {"points": total, "seconds": seconds, "log_loop_seconds": logged, "points_per_s": total / seconds, "batches": st["batches"]}


def _replay(url: str, steps: int, values: list[dict], spool: Path) -> dict:
    """A spool written during an outage (the server unreachable), then replayed by a restarted trainer:
    points/s from the new client's start to the end of its flush."""
    total = steps * len(METRICS)
    name = f"replay-{time.time_ns()}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    down = ParallaxClient(dead, "bench-client", name, spool_dir=spool, max_queue_values=2 * total, batch_values=BATCH_VALUES)
    for s in range(steps):
        down.log(values[s % 1000], s)
    down.close(timeout=0)
    if down.stats()["spooled"] != total:
        raise BenchError(f"client replay: expected {total} points in the spool, got {down.stats()}")
    start = time.perf_counter()
    with ParallaxClient(url, "bench-client", name, spool_dir=spool, batch_values=BATCH_VALUES) as px:
        if not px.flush(300):
            raise BenchError(f"client replay: flush did not finish: {px.stats()}")
        seconds = time.perf_counter() - start
        st = px.stats()
    if st["sent"] != total or st["dropped"]:
        raise BenchError(f"client replay: expected {total} points sent, got {st}")
    return {"points": total, "seconds": seconds, "points_per_s": total / seconds, "spool_bytes": down._spool.bytes if down._spool else 0}


def measure_end_to_end(url: str, steps: int, spool: Path) -> dict:
    rng = random.Random(8)
    values = [{m: rng.random() for m in METRICS} for _ in range(1000)]
    total = steps * len(METRICS)
    memory = _through_client(url, steps, values, spool / "memory")
    disk = _replay(url, steps, values, spool / "replay")
    rate = memory["points_per_s"]
    # the same points as ready-made bodies of the same size, posted one after another
    t0 = time.time()
    bodies = []
    per_body = BATCH_VALUES // len(METRICS)
    for first in range(0, steps, per_body):
        pts = [{"step": s, "metrics": values[s % 1000], "time": t0 + s * 1e-3} for s in range(first, min(steps, first + per_body))]
        bodies.append(json.dumps({"points": pts}, separators=(",", ":")).encode())
    with httpx.Client(base_url=url, timeout=300) as c:
        run = c.post("/api/v1/runs", json={"project": "bench-client", "name": f"direct-{time.time_ns()}"}).json()["id"]
        start = time.perf_counter()
        for b in bodies:
            r = c.post(f"/api/v1/runs/{run}/metrics", content=b, headers={"content-type": "application/json"})
            if r.status_code != 200:
                raise BenchError(f"direct ingest: HTTP {r.status_code} {r.text[:300]}")
        direct = total / (time.perf_counter() - start)
    log(f"client end-to-end: {rate:,.0f} points/s in memory, {disk['points_per_s']:,.0f} points/s replaying a spool "
        f"({disk['spool_bytes'] / 1e6:.0f} MB); direct JSON POSTs {direct:,.0f} points/s ({total:,} points each)")
    return {"steps": steps, "points": total, "points_per_s": rate, "spool_points_per_s": disk["points_per_s"],
            "direct_points_per_s": direct, "ratio": rate / direct, "spool_ratio": disk["points_per_s"] / direct,
            "memory": memory, "spool": disk}


def measure(quick: bool = False, lib: object = None) -> dict:
    """Both measures against a fresh server; the document bench.run puts under "client"."""
    global BenchError, log, running_server
    if lib is not None:
        BenchError, log, running_server = lib.BenchError, lib.log, lib.running_server
    with tempfile.TemporaryDirectory(prefix="parallax-bench-client-") as tmp:
        with running_server(Path(tmp)) as server:
            log(f"(h) client log() overhead: {len(METRICS)}-metric dicts")
            overhead = measure_overhead(server.url, ROUNDS_QUICK if quick else ROUNDS, Path(tmp) / "spool-h")
            log("(i) client end-to-end points/s")
            e2e = measure_end_to_end(server.url, E2E_STEPS_QUICK if quick else E2E_STEPS, Path(tmp) / "spool-i")
    return {"log_overhead": overhead, "end_to_end": e2e, "target_log_median_us_max": TARGET_LOG_MEDIAN_US,
            "met": overhead["median_us"] <= TARGET_LOG_MEDIAN_US}


def rows(doc: dict, Row: type) -> list:
    """Lines for bench.run's table."""
    o, e = doc["log_overhead"], doc["end_to_end"]
    return [
        Row(f"client log(), {o['metrics_per_call']} metrics, median", f"{o['median_us']:.2f} µs", target=f"≤ {doc['target_log_median_us_max']:.0f} µs", met=doc["met"]),
        Row(f"client log(), {o['metrics_per_call']} metrics, p99", f"{o['p99_us']:.2f} µs"),
        Row("client end-to-end", f"{e['points_per_s']:,.0f} pts/s", f"{e['direct_points_per_s']:,.0f} pts/s direct", f"{e['ratio']:.3f}"),
        Row("client spool replay after an outage", f"{e['spool_points_per_s']:,.0f} pts/s", f"{e['direct_points_per_s']:,.0f} pts/s direct", f"{e['spool_ratio']:.3f}"),
    ]


if __name__ == "__main__":
    out = measure(quick="--quick" in sys.argv)
    print(json.dumps(out, indent=2))
