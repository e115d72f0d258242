"""Parallax benchmark: HTTP ingest against raw sqlite3, series latency, server memory.

    .venv/bin/python -m bench.run [--quick] [--json PATH]

All measurements run against the real server (``parallax serve`` as a
subprocess, on a SQLite file in a temporary directory), side by side:

(a) HTTP ingest points/s, 8 metrics x 20,000 steps in 20 POSTs of 1,000 steps,
    with 1 client and with 4 concurrent clients (each its own run);
(b) the ceiling: plain ``sqlite3`` ``executemany`` of the same 160,000 rows in
    one transaction, same table and pragmas; (a)/(b) is the ingest ratio;
(a') HTTP ingest of a framework's own keys: verl's per-step dicts (~65 keys a step, a dozen of which the
    alias layer also stores under canonical names, as links), 1,000 steps per POST, 1 client, against
    plain ``sqlite3`` of the same rows measured in the same run (bench/frameworks.py);
(c) series latency: one metric of 20,000 points in full (against a raw
    SELECT + json.dumps on the server's own file) and one metric of 1,000,000
    points downsampled to 2,000;
(d) the server's RSS once the database holds 10,000,000 points;
(e, f) Prometheus ingest: Pushgateway pushes/s, remote-write samples/s against
    JSON ingest of the same shape (bench/prom.py);
(h, i) the trainer client: ``log`` overhead per call, end-to-end points/s (bench/client.py).
(j) harness audit: tokens/s over 10,000 turns of 4,000 tokens (bench/audit.py).
(k, l) dashboard: run page first render in headless Chromium, live refresh bytes; (k2) runs list of 10,000 runs,
    (k3) compare page of 8 long runs, (l2) live-update latency with 1 and 50 viewers (bench/dashboard.py).
(m, n) database size per million points on SQLite (and PostgreSQL), retention's deletion rate (bench/size.py).
(o) soak: points/s and p99 of 16 concurrent writers; SIGKILLs survived with no point lost (bench/soak.py;
    ``make soak`` runs it for a minute per backend, SQLite and PostgreSQL).
(p) hostile input: inputs tried (schemathesis and hypothesis example counts) and 5xx seen, target 0 (bench/fuzz.py).

Progress goes to stderr; the JSON document to stdout and to ``--json``; then
a table. Exit code 0 whether or not targets are met, 1 if the benchmark
itself failed (server did not start, a response had the wrong shape).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx
import orjson
from rich.console import Console
from rich.table import Table

from bench import frameworks

# -- workload --------------------------------------------------------------

METRICS = tuple(f"m{i}" for i in range(8))
STEPS_PER_RUN = 20_000
BATCH_STEPS = 1_000
CONCURRENT_CLIENTS = 4
REPEATS = 5  # the 1-client ratio sits near its target: a median of 5 keeps the verdict from flipping on noise

SERIES_REQUESTS = 30
SERIES_WARMUP = 2
FULL_SERIES_POINTS = STEPS_PER_RUN  # metric m0 of an ingest run
BIG_SERIES_POINTS = 1_000_000
BIG_SERIES_BATCH = 5_000
BIG_SERIES_METRIC = "big"
DOWNSAMPLED_MAX_POINTS = 2_000

RSS_POINTS = 10_000_000
RSS_POINTS_QUICK = 1_000_000
RSS_RUN_STEPS = 250_000  # 2,000,000 points per run while loading for (d)

T0 = 1_764_000_000.0  # wall time of step 0 in the generated points
PROJECT = "bench"

TARGETS = {
    "ingest_ratio_min": 0.5,
    "series_full_ratio_max": 3.0,
    "series_downsampled_p50_ms_max": 50.0,
    "rss_mb_max": 250.0,
}

POINTS_DDL = (
    "CREATE TABLE points (run_id INTEGER NOT NULL, key_id INTEGER NOT NULL, step BIGINT NOT NULL, "
    "value DOUBLE, nonfinite SMALLINT NOT NULL, time DOUBLE NOT NULL, "
    "CONSTRAINT pk_points PRIMARY KEY (run_id, key_id, step)) WITHOUT ROWID"
)
POINTS_INSERT = "INSERT INTO points (run_id, key_id, step, value, nonfinite, time) VALUES (?, ?, ?, ?, ?, ?)"

HTTP_TIMEOUT = httpx.Timeout(300.0, connect=10.0)
JSON_HEADERS = {"content-type": "application/json"}


class BenchError(RuntimeError):
    """The benchmark itself failed: its numbers would mean nothing."""


_started = time.perf_counter()


def log(msg: str) -> None:
    print(f"[bench {time.perf_counter() - _started:6.1f}s] {msg}", file=sys.stderr, flush=True)


# -- generated data ----------------------------------------------------------


def make_points(first_step: int, n_steps: int, metrics: tuple[str, ...], rng: random.Random) -> list[dict]:
    return [
        {"step": s, "metrics": {m: rng.random() for m in metrics}, "time": T0 + s * 0.5}
        for s in range(first_step, first_step + n_steps)
    ]


def encode(points: list[dict]) -> bytes:
    return orjson.dumps({"points": points})


@dataclass(frozen=True)
class Workload:
    """One run's points: the request bodies (pre-encoded) and the same points as rows for sqlite3."""

    bodies: list[bytes]
    rows: list[tuple]  # (run_id=1, key_id, step, value, nonfinite=0, time), in the order the server gets them
    points_per_body: int
    body_points: tuple[int, ...] = ()  # points of each body when they differ
    config: dict | None = None  # the runs' config
    #: points each body leaves in the database when it differs from what it sends (framework keys: a canonical value
    #: of its own, such as a mean over held-out datasets, is stored beside the raw keys; an unchanged one is a link)
    body_stored: tuple[int, ...] = ()

    @property
    def stored(self) -> list[int]:
        return list(self.body_stored) if self.body_stored else self.counts

    @property
    def counts(self) -> list[int]:
        return list(self.body_points) if self.body_points else [self.points_per_body] * len(self.bodies)

    @property
    def points(self) -> int:
        return sum(self.counts)


def make_workload(seed: int = 1) -> Workload:
    rng = random.Random(seed)
    key_ids = {m: i + 1 for i, m in enumerate(METRICS)}
    bodies, rows = [], []
    for first in range(0, STEPS_PER_RUN, BATCH_STEPS):
        points = make_points(first, BATCH_STEPS, METRICS, rng)
        bodies.append(encode(points))
        rows.extend((1, key_ids[m], p["step"], v, 0, p["time"]) for p in points for m, v in p["metrics"].items())
    return Workload(bodies=bodies, rows=rows, points_per_body=BATCH_STEPS * len(METRICS))


def make_framework_workload() -> Workload:
    """(a') verl's per-step dicts (bench/frameworks.py), ``frameworks.BATCH_STEPS`` steps per POST."""
    from parallax.ingest import aliases
    from parallax.ingest.points import parse_json

    points = frameworks.make_points(T0)
    run_aliasing = aliases.run_aliasing(frameworks.CONFIG)
    key_ids: dict[str, int] = {}
    bodies, rows, counts, stored = [], [], [], []
    for first in range(0, len(points), frameworks.BATCH_STEPS):
        chunk = points[first : first + frameworks.BATCH_STEPS]
        bodies.append(encode(chunk))
        counts.append(sum(len(p["metrics"]) for p in chunk))
        batch = parse_json(bodies[-1])
        aliases.apply(batch, run_aliasing)
        stored.append(sum(len(samples) for name, samples in batch.groups.items() if name not in (batch.links or {})))
        rows.extend(
            (1, key_ids.setdefault(m, len(key_ids) + 1), p["step"], v, 0, p["time"]) for p in chunk for m, v in p["metrics"].items()
        )
    return Workload(
        bodies=bodies, rows=rows, points_per_body=0, body_points=tuple(counts), config=frameworks.CONFIG, body_stored=tuple(stored)
    )


# -- statistics --------------------------------------------------------------


def percentile(samples: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    s = sorted(samples)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def latency_summary(seconds: list[float]) -> dict:
    ms = [x * 1000 for x in seconds]
    return {"p50_ms": percentile(ms, 0.5), "p95_ms": percentile(ms, 0.95), "min_ms": min(ms), "max_ms": max(ms), "samples_ms": ms}


# -- the server --------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parallax_command() -> Path:
    exe = Path(sys.executable).with_name("parallax")
    if not exe.exists():
        raise BenchError(f"{exe} not found: run the benchmark with the project's venv python (make bench)")
    return exe


@dataclass
class Server:
    proc: subprocess.Popen
    url: str
    db_path: Path
    log_path: Path

    def proc_status(self) -> dict[str, float]:
        """VmRSS and VmHWM of the server process, in MB."""
        out = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0]) / 1024  # kB -> MB
        return out

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"


@contextmanager
def running_server(workdir: Path, startup_timeout: float = 60.0) -> Iterator[Server]:
    port = free_port()
    db_path = workdir / "bench.db"
    log_path = workdir / "server.log"
    cmd = [str(parallax_command()), "serve", "--host", "127.0.0.1", "--port", str(port), "--database-url", f"sqlite:///{db_path}"]
    # The server's defaults, whatever PARALLAX_* the calling shell has (a token would turn every POST into a 401);
    # the working folder is the temporary one, so no parallax.toml is read either.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PARALLAX_")}
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = Server(proc=proc, url=f"http://127.0.0.1:{port}", db_path=db_path, log_path=log_path)
    try:
        wait_ready(server, startup_timeout)
        log(f"server pid {proc.pid} ready at {server.url}")
        try:
            yield server
        except BaseException:
            if proc.poll() is not None:
                log(f"server exited with code {proc.returncode}; its log ends with:\n{server.log_tail()}")
            raise
    finally:
        stop(proc)


def wait_ready(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise BenchError(f"server exited with code {server.proc.returncode}:\n{server.log_tail()}")
        try:
            r = httpx.get(server.url + "/healthz", timeout=2.0)
            if r.status_code == 200 and r.json().get("status") == "ok":
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise BenchError(f"server not ready after {timeout:.0f}s:\n{server.log_tail()}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)


# -- the API -----------------------------------------------------------------


class Api:
    """A keep-alive connection to the server. One per thread."""

    def __init__(self, url: str):
        self.client = httpx.Client(base_url=url, timeout=HTTP_TIMEOUT)

    def __enter__(self) -> "Api":
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def create_run(self, name: str, config: dict | None = None) -> int:
        r = self.client.post("/api/v1/runs", json={"project": PROJECT, "name": name, "config": config or {}})
        if r.status_code != 201:
            raise BenchError(f"creating run {name!r}: HTTP {r.status_code} {r.text[:300]} (expected 201: run names must be new)")
        return r.json()["id"]

    def post_metrics(self, run_id: int, body: bytes, expected_points: int) -> None:
        r = self.client.post(f"/api/v1/runs/{run_id}/metrics", content=body, headers=JSON_HEADERS)
        if r.status_code != 200:
            raise BenchError(f"ingest into run {run_id}: HTTP {r.status_code} {r.text[:300]}")
        got = r.json()
        if got.get("accepted") != expected_points or got.get("replaced") != 0:
            raise BenchError(f"ingest into run {run_id}: expected {expected_points} new points, got {got}")

    def series_bytes(self, run_id: int, metric: str, max_points: int) -> bytes:
        r = self.client.get(f"/api/v1/runs/{run_id}/series", params={"metric": metric, "max_points": max_points})
        if r.status_code != 200:
            raise BenchError(f"series of run {run_id}: HTTP {r.status_code} {r.text[:300]}")
        return r.content

    def telemetry(self) -> dict[str, float]:
        """The server's own ingest counters: seconds in parse+store (threadpool, includes waiting for
        the single writer) against seconds per whole POST request, summed over requests."""
        wanted = {
            "parallax_ingest_batch_duration_seconds_sum": "ingest_batch_seconds_sum",
            "parallax_ingest_batch_duration_seconds_count": "ingest_batches",
            'parallax_http_request_duration_seconds_sum{method="POST",route="/api/v1/runs/{run_id}/metrics"}': "post_metrics_request_seconds_sum",
            "parallax_ingest_rules_duration_seconds_sum": "rules_seconds_sum",
        }
        out = {}
        for line in self.client.get("/metrics").text.splitlines():
            name, _, value = line.rpartition(" ")
            if name in wanted:
                out[wanted[name]] = float(value)
        return out


class PointCounter:
    """Points stored in the server's database so far, across phases and threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.total = 0

    def add(self, n: int) -> None:
        with self._lock:
            self.total += n


_run_seq = 0


def new_run_name(tag: str) -> str:
    global _run_seq
    _run_seq += 1
    return f"{tag}-{_run_seq}-{os.getpid()}"


# -- (b) the raw sqlite3 ceiling ---------------------------------------------


def raw_insert_seconds(db_path: Path, rows: list[tuple]) -> float:
    """executemany of ``rows`` in one transaction into a fresh file with the server's table and pragmas."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(POINTS_DDL)
        start = time.perf_counter()
        conn.execute("BEGIN")
        conn.executemany(POINTS_INSERT, rows)
        conn.execute("COMMIT")
        elapsed = time.perf_counter() - start
        (count,) = conn.execute("SELECT count(*) FROM points").fetchone()
    finally:
        conn.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    if count != len(rows):
        raise BenchError(f"raw sqlite3: {count} rows stored, expected {len(rows)}")
    return elapsed


def measure_raw_ceiling(workdir: Path, workload: Workload, repeats: int) -> dict:
    rates = []
    for i in range(repeats):
        seconds = raw_insert_seconds(workdir / f"raw-{i}.db", workload.rows)
        rates.append(len(workload.rows) / seconds)
        log(f"raw sqlite3 executemany: {rates[-1]:,.0f} points/s ({seconds:.3f}s)")
    return {"points": len(workload.rows), "samples_points_per_s": rates, "points_per_s": statistics.median(rates)}


# -- (a) HTTP ingest ---------------------------------------------------------


def _ingest_client(url: str, run_name: str, workload: Workload, barrier: threading.Barrier, counter: PointCounter) -> tuple[int, float]:
    """One client: create its run, wait for the others, send every body; returns (run id, time of last response)."""
    try:
        with Api(url) as api:
            run_id = api.create_run(run_name, workload.config)  # also opens the keep-alive connection before timing
            barrier.wait()
            for body, points, stored in zip(workload.bodies, workload.counts, workload.stored):
                api.post_metrics(run_id, body, points)
                counter.add(stored)
            return run_id, time.perf_counter()
    except BaseException:
        barrier.abort()  # release the others rather than leave them waiting
        raise


def ingest_once(server: Server, workload: Workload, clients: int, counter: PointCounter) -> dict:
    """``clients`` threads, each sending one run's bodies; throughput over first send to last response."""
    starts: list[float] = []
    barrier = threading.Barrier(clients, action=lambda: starts.append(time.perf_counter()))
    server_cpu, client_cpu = server.cpu_seconds(), time.process_time()
    with ThreadPoolExecutor(clients) as pool:
        futures = [
            pool.submit(_ingest_client, server.url, new_run_name(f"ingest{clients}"), workload, barrier, counter)
            for _ in range(clients)
        ]
        wait(futures)
    errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:  # the cause, rather than the broken barrier it left the other clients with
        raise next((e for e in errors if not isinstance(e, threading.BrokenBarrierError)), errors[0])
    results = [f.result() for f in futures]
    wall = max(end for _, end in results) - starts[0]
    points = clients * workload.points
    return {
        "run_ids": [run_id for run_id, _ in results],
        "points": points,
        "seconds": wall,
        "points_per_s": points / wall,
        "server_cpu_s": server.cpu_seconds() - server_cpu,
        "client_cpu_s": time.process_time() - client_cpu,  # the bench process, all its threads
    }


def measure_ingest(server: Server, api: Api, workload: Workload, clients: int, repeats: int, counter: PointCounter) -> dict:
    samples = []
    telemetry_before = api.telemetry()
    for _ in range(repeats):
        samples.append(ingest_once(server, workload, clients, counter))
        s = samples[-1]
        log(
            f"HTTP ingest, {clients} client(s): {s['points_per_s']:,.0f} points/s ({s['points']:,} points in "
            f"{s['seconds']:.2f}s; CPU: server {s['server_cpu_s']:.2f}s, bench {s['client_cpu_s']:.2f}s)"
        )
    telemetry = {k: v - telemetry_before.get(k, 0.0) for k, v in api.telemetry().items()}
    if telemetry.get("post_metrics_request_seconds_sum"):
        log(
            f"server telemetry, {clients} client(s): {telemetry['ingest_batch_seconds_sum']:.2f}s in parse+store "
            f"(of which {telemetry.get('rules_seconds_sum', 0.0):.2f}s judging rules) "
            f"of {telemetry['post_metrics_request_seconds_sum']:.2f}s of POST request time (summed over requests)"
        )
    median = statistics.median(s["points_per_s"] for s in samples)
    return {"clients": clients, "points_per_s": median, "samples": samples, "server_telemetry": telemetry}


def warm_up(api: Api, workload: Workload, counter: PointCounter) -> None:
    """One batch into a throw-away run: creates the metric keys and warms the code paths before timing."""
    run_id = api.create_run(new_run_name("warmup"), workload.config)
    api.post_metrics(run_id, workload.bodies[0], workload.counts[0])
    counter.add(workload.stored[0])


# -- (c) series latency ------------------------------------------------------


def timed_calls(call: Callable[[], Any], n: int, warmup: int = SERIES_WARMUP) -> tuple[list[float], list[Any]]:
    for _ in range(warmup):
        call()
    seconds, results = [], []
    for _ in range(n):
        start = time.perf_counter()
        results.append(call())
        seconds.append(time.perf_counter() - start)
    return seconds, results


def load_big_series(api: Api, counter: PointCounter) -> int:
    """A run with one metric of BIG_SERIES_POINTS points, sent in batches of BIG_SERIES_BATCH steps."""
    rng = random.Random(2)
    metrics = (BIG_SERIES_METRIC,)
    start = time.perf_counter()
    run_id = api.create_run(new_run_name("big-series"))
    for first in range(0, BIG_SERIES_POINTS, BIG_SERIES_BATCH):
        api.post_metrics(run_id, encode(make_points(first, BIG_SERIES_BATCH, metrics, rng)), BIG_SERIES_BATCH)
        counter.add(BIG_SERIES_BATCH)
    log(f"loaded {BIG_SERIES_POINTS:,} points of one metric into run {run_id} in {time.perf_counter() - start:.1f}s")
    return run_id


def series_of(payload: bytes, metric: str) -> dict:
    doc = orjson.loads(payload)
    try:
        return doc["series"][metric]
    except (KeyError, TypeError):
        raise BenchError(f"series response without series[{metric!r}]: {payload[:300]!r}") from None


def check_full_series(payload: bytes, metric: str, expected: dict) -> None:
    s = series_of(payload, metric)
    if s.get("downsampled") is not False or len(s["steps"]) != FULL_SERIES_POINTS or len(s["values"]) != FULL_SERIES_POINTS:
        raise BenchError(f"full series: expected {FULL_SERIES_POINTS} points, not downsampled; got {len(s['steps'])}, downsampled={s.get('downsampled')}")
    if s["steps"] != expected["steps"] or s["values"] != expected["values"]:
        raise BenchError("full series: the points differ from what the database holds")


def check_downsampled_series(payload: bytes, metric: str) -> None:
    s = series_of(payload, metric)
    n = len(s["steps"])
    if s.get("downsampled") is not True or not 0 < n <= DOWNSAMPLED_MAX_POINTS:
        raise BenchError(f"downsampled series: expected 1..{DOWNSAMPLED_MAX_POINTS} points, downsampled; got {n}, downsampled={s.get('downsampled')}")
    if not (len(s["values"]) == len(s["min"]) == len(s["max"]) == n):
        raise BenchError("downsampled series: steps, values, min and max differ in length")
    if s["steps"][0] != 0 or s["steps"][-1] != BIG_SERIES_POINTS - 1:
        raise BenchError(f"downsampled series: spans steps {s['steps'][0]}..{s['steps'][-1]}, expected 0..{BIG_SERIES_POINTS - 1}")


@contextmanager
def read_only_db(path: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        yield conn
    finally:
        conn.close()


def key_id(conn: sqlite3.Connection, name: str) -> int:
    row = conn.execute("SELECT id FROM metric_keys WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise BenchError(f"metric {name!r} not in the server's metric_keys")
    return row[0]


def measure_series(server: Server, api: Api, full_run_id: int, big_run_id: int) -> dict:
    metric = METRICS[0]
    with read_only_db(server.db_path) as db:
        kid = key_id(db, metric)

        def raw_full() -> bytes:
            rows = db.execute("SELECT step, value FROM points WHERE run_id = ? AND key_id = ? ORDER BY step", (full_run_id, kid)).fetchall()
            return json.dumps({"steps": [r[0] for r in rows], "values": [r[1] for r in rows]}).encode()

        raw_seconds, raw_payloads = timed_calls(raw_full, SERIES_REQUESTS)
        expected = json.loads(raw_payloads[0])
        if len(expected["steps"]) != FULL_SERIES_POINTS:
            raise BenchError(f"raw select: {len(expected['steps'])} points in run {full_run_id}, expected {FULL_SERIES_POINTS}")

        full_seconds, full_payloads = timed_calls(lambda: api.series_bytes(full_run_id, metric, FULL_SERIES_POINTS), SERIES_REQUESTS)
        for p in full_payloads:
            check_full_series(p, metric, expected)

        ds_seconds, ds_payloads = timed_calls(lambda: api.series_bytes(big_run_id, BIG_SERIES_METRIC, DOWNSAMPLED_MAX_POINTS), SERIES_REQUESTS)
        for p in ds_payloads:
            check_downsampled_series(p, BIG_SERIES_METRIC)

    result = {
        "requests": SERIES_REQUESTS,
        "full": {
            "run_id": full_run_id, "points": FULL_SERIES_POINTS, "max_points": FULL_SERIES_POINTS,
            "response_bytes": len(full_payloads[0]), **latency_summary(full_seconds),
        },
        "raw_select_json": {"response_bytes": len(raw_payloads[0]), **latency_summary(raw_seconds)},
        "downsampled": {
            "run_id": big_run_id, "points": BIG_SERIES_POINTS, "max_points": DOWNSAMPLED_MAX_POINTS,
            "returned_points": len(series_of(ds_payloads[0], BIG_SERIES_METRIC)["steps"]),
            "response_bytes": len(ds_payloads[0]), **latency_summary(ds_seconds),
        },
    }
    result["full_ratio"] = result["full"]["p50_ms"] / result["raw_select_json"]["p50_ms"]
    for name in ("full", "raw_select_json", "downsampled"):
        r = result[name]
        log(f"series {name}: p50 {r['p50_ms']:.2f} ms, p95 {r['p95_ms']:.2f} ms, {r['response_bytes']:,} bytes")
    return result


# -- (d) memory after 10M points ---------------------------------------------


def load_points_until(api: Api, target: int, counter: PointCounter) -> dict:
    """Ingest 8-metric batches of 1,000 steps into new runs until the database holds ``target`` points."""
    rng = random.Random(3)
    per_step = len(METRICS)
    sent_here, runs = 0, 0
    start = time.perf_counter()
    next_report = counter.total + 500_000
    while counter.total < target:
        run_id = api.create_run(new_run_name("rss"))
        runs += 1
        for first in range(0, RSS_RUN_STEPS, BATCH_STEPS):
            steps = min(BATCH_STEPS, -(-(target - counter.total) // per_step))
            if steps <= 0:
                break
            api.post_metrics(run_id, encode(make_points(first, steps, METRICS, rng)), steps * per_step)
            counter.add(steps * per_step)
            sent_here += steps * per_step
            if counter.total >= next_report:
                rate = sent_here / (time.perf_counter() - start)
                log(f"loading: {counter.total:,} / {target:,} points in the database ({rate:,.0f} points/s)")
                next_report += 1_000_000
    seconds = time.perf_counter() - start
    return {"points_sent": sent_here, "runs": runs, "seconds": seconds, "points_per_s": sent_here / seconds if seconds else None}


def measure_memory(server: Server, api: Api, target: int, counter: PointCounter) -> dict:
    if counter.total >= target:
        log(f"the earlier phases already stored {counter.total:,} points: nothing more to load")
    loading = load_points_until(api, target, counter)
    status = server.proc_status()
    with read_only_db(server.db_path) as db:
        (stored,) = db.execute("SELECT count(*) FROM points").fetchone()
    if stored != counter.total:
        raise BenchError(f"the database holds {stored:,} points, but {counter.total:,} were sent")
    log(f"{stored:,} points stored: server VmRSS {status['VmRSS']:.1f} MB, VmHWM {status['VmHWM']:.1f} MB")
    return {"points_in_db": stored, "rss_mb": status["VmRSS"], "peak_rss_mb": status["VmHWM"], "loading": loading}


# -- results -----------------------------------------------------------------


@dataclass
class Row:
    """One line of the table."""

    measure: str
    value: str
    baseline: str = ""
    ratio: str = ""
    target: str = ""
    met: bool | None = None


@dataclass
class Report:
    document: dict
    rows: list[Row] = field(default_factory=list)


def machine_info() -> dict:
    return {
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "machine": platform.machine(),
    }


def build_report(
    args: argparse.Namespace, raw: dict, one: dict, four: dict, series: dict, memory: dict, rss_timeline: dict,
    fw_raw: dict, fw: dict,
) -> Report:
    t = TARGETS
    ratio_1 = one["points_per_s"] / raw["points_per_s"]
    ratio_4 = four["points_per_s"] / raw["points_per_s"]
    ratio_fw = fw["points_per_s"] / fw_raw["points_per_s"]
    # The rules judge each new step of a batch inside its request: their share, and the rate with it set aside.
    fw_rules_s = fw["server_telemetry"].get("rules_seconds_sum", 0.0)
    fw_wall = sum(x["seconds"] for x in fw["samples"])
    fw_points = sum(x["points"] for x in fw["samples"])
    fw_rules_share = fw_rules_s / fw_wall if fw_wall else 0.0
    fw_rules_aside = fw_points / (fw_wall - fw_rules_s) if fw_wall > fw_rules_s else float("nan")
    ds_p50 = series["downsampled"]["p50_ms"]
    met = {
        "ingest_ratio_1_client": ratio_1 >= t["ingest_ratio_min"],
        "ingest_ratio_4_clients": ratio_4 >= t["ingest_ratio_min"],
        "ingest_ratio_framework_keys": ratio_fw >= t["ingest_ratio_min"],
        "series_full_ratio": series["full_ratio"] <= t["series_full_ratio_max"],
        "series_downsampled_p50": ds_p50 <= t["series_downsampled_p50_ms_max"],
        "server_rss": memory["rss_mb"] <= t["rss_mb_max"],
    }
    document = {
        "benchmark": "parallax bench.run",
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "quick": args.quick,
        "machine": machine_info(),
        "workload": {
            "metrics_per_step": len(METRICS), "steps_per_run": STEPS_PER_RUN, "steps_per_batch": BATCH_STEPS,
            "points_per_batch": BATCH_STEPS * len(METRICS), "concurrent_clients": CONCURRENT_CLIENTS,
            "repeats": args.repeats, "series_requests": SERIES_REQUESTS, "series_warmup_requests": SERIES_WARMUP,
            "rss_target_points": args.rss_points,
        },
        "ingest": {
            "raw_sqlite_points_per_s": raw["points_per_s"],
            "http_1_client_points_per_s": one["points_per_s"],
            "http_4_clients_points_per_s": four["points_per_s"],
            "ratio_1_client": ratio_1,
            "ratio_4_clients": ratio_4,
            "raw_sqlite": raw,
            "http_1_client": one,
            "http_4_clients": four,
            "framework_keys": {
                "workload": "verl per-step dicts (bench/frameworks.py)", "keys_per_step": fw_raw["points"] // frameworks.STEPS,
                "steps_per_batch": frameworks.BATCH_STEPS, "raw_sqlite": fw_raw, "http_1_client": fw, "ratio_1_client": ratio_fw,
                "rules_share_of_wall_time": fw_rules_share, "points_per_s_rules_aside": fw_rules_aside,
                "ratio_rules_aside": fw_rules_aside / fw_raw["points_per_s"],
            },
        },
        "series": series,
        "memory": {**memory, "rss_timeline_mb": rss_timeline},
        "targets": t,
        "met": met,
        "all_met": all(met.values()),
    }
    pts = lambda x: f"{x:,.0f} pts/s"  # noqa: E731
    ms = lambda x: f"{x:.2f} ms"  # noqa: E731
    full, raw_json, ds = series["full"], series["raw_select_json"], series["downsampled"]
    rows = [
        Row("ingest, 1 client", pts(one["points_per_s"]), pts(raw["points_per_s"]), f"{ratio_1:.3f}", f"ratio ≥ {t['ingest_ratio_min']}", met["ingest_ratio_1_client"]),
        Row(f"ingest, {CONCURRENT_CLIENTS} clients", pts(four["points_per_s"]), pts(raw["points_per_s"]), f"{ratio_4:.3f}", f"ratio ≥ {t['ingest_ratio_min']}", met["ingest_ratio_4_clients"]),
        Row(f"ingest, verl step dicts ({fw_raw['points'] // frameworks.STEPS} keys), 1 client", pts(fw["points_per_s"]), pts(fw_raw["points_per_s"]),
            f"{ratio_fw:.3f}", f"ratio ≥ {t['ingest_ratio_min']}", met["ingest_ratio_framework_keys"]),
        Row(f"  the same, rules aside ({fw_rules_share:.0%} of its time)", pts(fw_rules_aside),
            pts(fw_raw["points_per_s"]), f"{fw_rules_aside / fw_raw['points_per_s']:.3f}"),
        Row("series 20k full, p50", ms(full["p50_ms"]), ms(raw_json["p50_ms"]) + " raw", f"{series['full_ratio']:.2f}", f"ratio ≤ {t['series_full_ratio_max']}", met["series_full_ratio"]),
        Row("series 20k full, p95", ms(full["p95_ms"]), ms(raw_json["p95_ms"]) + " raw", f"{full['p95_ms'] / raw_json['p95_ms']:.2f}"),
        Row(f"series 1M → {ds['returned_points']} pts, p50", ms(ds_p50), target=f"≤ {t['series_downsampled_p50_ms_max']:.0f} ms", met=met["series_downsampled_p50"]),
        Row(f"series 1M → {ds['returned_points']} pts, p95", ms(ds["p95_ms"])),
        Row(f"server RSS at {memory['points_in_db']:,} pts", f"{memory['rss_mb']:.1f} MB", f"{rss_timeline['after_start']:.1f} MB at start", target=f"≤ {t['rss_mb_max']:.0f} MB", met=met["server_rss"]),
        Row("server peak RSS (VmHWM)", f"{memory['peak_rss_mb']:.1f} MB"),
    ]
    return Report(document=document, rows=rows)


def print_table(
    report: Report, title: str = "Parallax benchmark", columns: tuple[str, ...] = ("measure", "value", "baseline", "ratio", "target", "met")
) -> None:
    table = Table(title=title + (" (--quick)" if report.document["quick"] else ""))
    for col in columns:
        table.add_column(col, justify="left" if col == "measure" else "right")
    for r in report.rows:
        met = "" if r.met is None else ("[green]yes[/green]" if r.met else "[red]NO[/red]")
        table.add_row(r.measure, r.value, r.baseline, r.ratio, r.target, met)
    m = report.document["machine"]
    table.caption = f"{m['cpu_count']} CPUs, Python {m['python']}, SQLite {m['sqlite']}"
    Console(file=sys.stdout, width=None if sys.stdout.isatty() else 120).print(table)


# -- main ------------------------------------------------------------------------


def run_benchmark(args: argparse.Namespace) -> Report:
    workload = make_workload()
    counter = PointCounter()
    with tempfile.TemporaryDirectory(prefix="parallax-bench-") as tmp:
        workdir = Path(tmp)
        log(f"(b) raw sqlite3 ceiling: {len(workload.rows):,} rows in one transaction, x{args.repeats}")
        raw = measure_raw_ceiling(workdir, workload, args.repeats)
        with running_server(workdir) as server:
            rss_timeline = {"after_start": server.proc_status()["VmRSS"]}
            with Api(server.url) as api:
                warm_up(api, workload, counter)
                log(f"(a) HTTP ingest: {len(workload.bodies)} POSTs of {workload.points_per_body:,} points per client, x{args.repeats}")
                one = measure_ingest(server, api, workload, 1, args.repeats, counter)
                four = measure_ingest(server, api, workload, CONCURRENT_CLIENTS, args.repeats, counter)
                fw_workload = make_framework_workload()
                log(f"(a') verl's per-step dicts: {len(fw_workload.bodies)} POSTs, {fw_workload.points:,} points, x{args.repeats}, "
                    "against sqlite3 of the same rows")
                fw_raw = measure_raw_ceiling(workdir, fw_workload, args.repeats)
                warm_up(api, fw_workload, counter)
                fw = measure_ingest(server, api, fw_workload, 1, args.repeats, counter)
                rss_timeline["after_ingest"] = server.proc_status()["VmRSS"]
                log(f"(c) series latency: loading {BIG_SERIES_POINTS:,} points of one metric")
                big_run = load_big_series(api, counter)
                series = measure_series(server, api, one["samples"][0]["run_ids"][0], big_run)
                rss_timeline["after_series"] = server.proc_status()["VmRSS"]
                log(f"(d) memory: loading until the database holds {args.rss_points:,} points ({counter.total:,} so far)")
                memory = measure_memory(server, api, args.rss_points, counter)
    report = build_report(args, raw, one, four, series, memory, rss_timeline, fw_raw, fw)
    from bench import prom  # (e) Pushgateway pushes/s, (f) remote write vs JSON ingest, on a server of their own

    doc = report.document["prometheus"] = prom.measure(args.quick, sys.modules[__name__])
    report.document["met"]["prometheus_remote_write_ratio"] = doc["met"]
    report.rows.extend(prom.rows(doc, Row))
    from bench import client  # (h) ParallaxClient.log overhead, (i) end-to-end points/s through it, on a server of its own

    doc = report.document["client"] = client.measure(args.quick, sys.modules[__name__])
    report.document["met"]["client_log_median"] = doc["met"]
    report.rows.extend(client.rows(doc, Row))
    from bench import rules  # (g) rule evaluation cost against ingest, in-process

    log(f"(g) rule evaluation: {rules.RUNS:,} live runs, {rules.BATCH_STEPS}-step batches")
    doc = report.document["rules"] = rules.measure(rules.RUNS // 4 if args.quick else rules.RUNS)
    log(f"(g) the same on the healthy runs of make eval's families (seed {rules.FAMILY_SEED})")
    doc["families"] = rules.measure_families()
    report.document["met"]["rule_eval_share"] = doc["met"]
    report.rows.extend(rules.rows(doc, Row))
    from bench import audit  # (j) harness audit tokens/s, in-process

    log("(j) harness audit: tokens/s over turns of 4,000 tokens")
    doc = report.document["audit"] = audit.measure(args.quick)
    report.document["met"]["audit_tokens_per_s"] = doc["met"]
    report.rows.extend(audit.rows(doc, Row))
    from bench import size  # (m) database size per million points, (n) retention deleting them, in-process

    log("(m) database size: 1,000,000 points into a fresh SQLite file (and PostgreSQL when configured)")
    doc = report.document["size"] = size.measure(args.quick)
    report.document["met"]["sqlite_mb_per_million_points"] = doc["met"]
    report.rows.extend(size.rows(doc, Row))
    from bench import dashboard  # (k, l) run page, live refresh, runs list, compare page, latency: a server of its own

    doc = report.document["dashboard"] = dashboard.measure(args.quick, sys.modules[__name__])
    report.document["met"]["dashboard"] = doc["met"]
    report.rows.extend(dashboard.rows(doc, Row))
    from bench import soak  # (o) soak: concurrent writers, then SIGKILLs mid-ingest; every acknowledged point checked

    log("(o) soak: 16 concurrent writers x 4 runs, then writers while the server is SIGKILLed and restarted (SQLite)")
    doc = report.document["soak"] = soak.section(args.quick)
    report.document["met"]["soak"] = doc["met"]
    report.rows.extend(soak.rows(doc["reports"], Row))
    from bench import fuzz  # (p) hostile input: schemathesis and hypothesis example counts, 5xx seen (target 0), in-process

    log("(p) hostile input: schemathesis over the API, hypothesis over the Prometheus and JSON parsers")
    doc = report.document["fuzz"] = fuzz.measure(args.quick)
    report.document["met"]["fuzz_no_5xx"] = doc["met"]
    report.rows.extend(fuzz.rows(doc, Row))
    report.document["all_met"] = all(report.document["met"].values())
    return report


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"smoke run: 1 repetition, memory read once {RSS_POINTS_QUICK:,} points are stored (the earlier phases already store more)")
    parser.add_argument("--json", type=Path, default=Path(__file__).resolve().parent / "results" / "latest.json", help="where to write the JSON results")
    args = parser.parse_args(argv)
    args.repeats = 1 if args.quick else REPEATS
    args.rss_points = RSS_POINTS_QUICK if args.quick else RSS_POINTS
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        report = run_benchmark(args)
    except (BenchError, httpx.HTTPError, OSError, sqlite3.Error, threading.BrokenBarrierError) as exc:
        print(f"bench: FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(report.document, indent=2)
    print(text)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(text + "\n")
    log(f"results written to {args.json}")
    print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
