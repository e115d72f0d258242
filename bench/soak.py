"""Soak: concurrent writers, and servers SIGKILLed at random moments; then every point is checked.

    .venv/bin/python -m bench.soak [--seconds 60] [--writers 16] [--runs 4] [--kills 8] [--backend sqlite|postgresql]…

``make soak`` runs the full-length version on SQLite and on PostgreSQL
(PARALLAX_TEST_POSTGRES_URL names a server; a database of its own is created
and dropped): a minute of load, then a minute of uptime between kills. ``make
bench`` runs a short one (``section``); tests/test_crash.py and
tests/test_concurrency.py run bounded ones through ``soak``.

Load: ``servers`` processes of ``parallax serve`` on one database (several
only on PostgreSQL, as behind a load balancer). The writers first ask for
their runs all at once (one id and one 201 per name). Then ``writers`` threads,
each with its own keep-alive httpx client, post batches of ``steps_per_batch``
steps x ``metrics`` metrics to one of ``runs`` runs. The writers of one run
share its metric names and interleave their steps (writer i of k owns the
steps = i mod k), so every batch of a run touches the same rollup blocks and
``latest`` rows as the others: the contention the derived tables must
survive. Every value is a function of (run, metric, step), a few of them NaN.
``push_writers`` more push one step at a time through the Pushgateway route
(``PUT /metrics/job/…``, the step gauge stored too), each into a run of its own.
``readers`` threads meanwhile read series and /metrics, as open dashboards do.

Faults: with ``kills``, a killer thread SIGKILLs a server after a seeded random
uptime and starts it again on the same port and database, ``kills`` times. A
batch whose request failed (in flight at the kill, or refused while the server
was down) is either sent again until acknowledged (an idempotent retry, as the
trainer client does; it must replace nothing) or abandoned, at random.

Check, straight from the database once the servers have stopped:

- lost: a point of an acknowledged (2xx) batch missing, or with another value;
- partial: an abandoned batch stored in part (a batch is one transaction: all or nothing);
- duplicated: a (run, metric, step) stored twice, or counted twice in the
  rollups (their counts must equal the points'), or a point nobody sent;
- ``latest`` and the run's ``last_step`` equal to the highest step's point;
- no "database is locked" or traceback in the servers' output, no 5xx answer.

``report`` gives points/s, writers, runs, p50/p99 ingest latency, kills,
restarts and the counts above; ``ok`` is whether all of them hold.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
from sqlalchemy import Connection, create_engine, make_url, text
from sqlalchemy.exc import OperationalError

from tests.servers import ServerProcess, fresh_postgres_database

ROLLUP_BLOCKS = ((1, 64), (2, 4096))  # server.store.sql.ROLLUP_LEVELS, restated: the check must not trust the code it checks
TAIL_S = 1.0  # seconds of load after the last restart
NAN_EVERY = 97  # a step divisible by it carries NaN in metric 0
JSON_HEADERS = {"content-type": "application/json"}
PUSH_HEADERS = {"content-type": "text/plain; version=0.0.4"}
LOCKED = "database is locked"
PG_ADMIN_URL = os.environ.get("PARALLAX_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@dataclass
class SoakConfig:
    database_url: str
    seconds: float = 10.0
    writers: int = 16
    runs: int = 4
    metrics: int = 4
    steps_per_batch: int = 25
    kills: int = 0  # SIGKILLs, each after a seeded random uptime averaging seconds / (kills + 1)
    servers: int = 1  # parallax processes on the database, the writers spread over them (PostgreSQL)
    push_writers: int = 0  # writers pushing through the Pushgateway route instead, one run each
    readers: int = 2  # threads reading series and /metrics meanwhile, as open dashboards do
    retry_share: float = 0.5  # of the failed batches, the share sent again (the rest are abandoned)
    seed: int = 1
    request_timeout: float = 30.0


@dataclass
class SentBatch:
    run: int  # index into the soak's runs
    steps: list[int]
    acked: bool = False
    attempts: int = 0
    abandoned: bool = False


@dataclass
class WriterStats:
    latencies: list[float] = field(default_factory=list)  # seconds, of acknowledged requests
    batches: list[SentBatch] = field(default_factory=list)
    failed_requests: int = 0  # transport errors: the server killed or down
    http_5xx: list[str] = field(default_factory=list)
    http_other: list[str] = field(default_factory=list)
    bad_answers: list[str] = field(default_factory=list)  # a 2xx whose counts were wrong


def metric_names(n: int) -> list[str]:
    return [f"soak_m{j}" for j in range(n)]


def value_of(run: int, metric: int, step: int) -> float:
    """The value every writer sends for this point; NaN now and then (stored as a marker)."""
    if metric == 0 and step % NAN_EVERY == 0:
        return math.nan
    return ((run * 1_000_003 + metric * 7_919 + step * 31) % 1_000_033) / 997.0


def body_of(run: int, steps: list[int], n_metrics: int) -> bytes:
    points = [{"step": s, "metrics": {m: value_of(run, j, s) for j, m in enumerate(metric_names(n_metrics))}} for s in steps]
    return orjson.dumps({"points": points}).replace(b"null", b"NaN")  # orjson writes NaN as null; the API takes NaN as json.dumps writes it


def push_body_of(run: int, step: int, n_metrics: int) -> str:
    """One Pushgateway push (text format) of the metrics at ``step``, with the step gauge."""
    lines = [f"{m} {value_of(run, j, step)!r}" for j, m in enumerate(metric_names(n_metrics))]
    return "\n".join([*lines, f"step {step}", ""]).replace("nan", "NaN")


def percentile(samples: list[float], q: float) -> float | None:
    if not samples:
        return None
    s = sorted(samples)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


# -- load ---------------------------------------------------------------------------


class Soak:
    def __init__(self, cfg: SoakConfig, servers: list[ServerProcess]):
        self.cfg = cfg
        self.servers = servers  # processes on one database (behind a load balancer, as DESIGN §7 has it)
        self.project = f"soak-{uuid.uuid4().hex[:8]}"
        self.run_ids: list[int] = []
        self.stats = [WriterStats() for _ in range(cfg.writers + cfg.push_writers)]
        self.read_stats = [WriterStats() for _ in range(cfg.readers)]
        self.run_errors: list[str] = []
        self.kill_times: list[float] = []
        self.restart_seconds: list[float] = []
        self.killer_error: BaseException | None = None
        self.end = math.inf

    def url_of(self, w: int) -> str:
        """Writer ``w``'s server: the writers of one run are spread over the servers."""
        return self.servers[(w // self.cfg.runs) % len(self.servers)].url

    def create_runs(self) -> None:
        """Every writer asks for its run at once (POST /api/v1/runs of the same names): one id per name, one 201 each."""
        answers: list[tuple[int, int, int] | str] = [""] * self.cfg.writers
        barrier = threading.Barrier(self.cfg.writers)

        def ask(w: int) -> None:
            with httpx.Client(base_url=self.url_of(w), timeout=self.cfg.request_timeout) as client:
                barrier.wait()
                r = client.post("/api/v1/runs", json={"project": self.project, "name": f"run-{w % self.cfg.runs}", "config": {}})
                answers[w] = (w % self.cfg.runs, r.status_code, r.json().get("id")) if r.status_code in (200, 201) else f"{r.status_code} {r.text[:300]}"

        threads = [threading.Thread(target=ask, args=(w,)) for w in range(self.cfg.writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        bad = [a for a in answers if not isinstance(a, tuple)]
        if bad:
            raise RuntimeError(f"creating runs: {bad[:3]}")
        for run in range(self.cfg.runs):
            got = [(code, rid) for r, code, rid in answers if r == run]
            ids = {rid for _, rid in got}
            if len(ids) != 1 or [code for code, _ in got].count(201) != 1:
                self.run_errors.append(f"run-{run} asked for concurrently: {got} (expected one id, one 201)")
            self.run_ids.append(min(ids))

    def reader(self, r: int) -> None:
        """What a dashboard does meanwhile: series of a random run and metric, now and then /metrics."""
        cfg, stats = self.cfg, self.read_stats[r]
        rng = random.Random(cfg.seed * 7_000 + r)
        names = metric_names(cfg.metrics)
        with httpx.Client(base_url=self.servers[r % len(self.servers)].url, timeout=cfg.request_timeout) as client:
            i = 0
            while time.monotonic() < self.end:
                i += 1
                start = time.perf_counter()
                try:
                    if i % 5 == 0:
                        resp = client.get("/metrics")
                    else:
                        run_id = rng.choice(self.run_ids[: self.cfg.runs])
                        resp = client.get(f"/api/v1/runs/{run_id}/series", params={"metric": rng.choice(names), "max_points": 500})
                except httpx.TransportError:
                    stats.failed_requests += 1
                    time.sleep(0.2)  # the server is down
                    continue
                if resp.status_code == 200:
                    stats.latencies.append(time.perf_counter() - start)
                    if i % 5:
                        series = next(iter(resp.json()["series"].values()))
                        steps = series["steps"]
                        if len(steps) > 500 or any(a >= b for a, b in zip(steps, steps[1:])):
                            stats.bad_answers.append(f"series of run {run_id}: {len(steps)} steps, not increasing or too many")
                else:
                    (stats.http_5xx if resp.status_code >= 500 else stats.http_other).append(f"GET {resp.status_code} {resp.text[:300]}")
                time.sleep(0.02)

    def writer(self, w: int) -> None:
        """Writer ``w``: JSON batches into its run (w < writers), else one Pushgateway push per step into a run of its own."""
        cfg = self.cfg
        n_json = cfg.writers
        if w < n_json:
            run = w % cfg.runs
            per_run = -(-cfg.writers // cfg.runs)
            slot = w // cfg.runs  # this writer's steps are the ones = slot (mod per_run) of its run
            path = f"/api/v1/runs/{self.run_ids[run]}/metrics"
            expected = cfg.steps_per_batch * cfg.metrics
            url = self.url_of(w)

            def batch_of(b: int) -> tuple[list[int], str, bytes, dict]:
                steps = [(b * cfg.steps_per_batch + i) * per_run + slot for i in range(cfg.steps_per_batch)]
                return steps, "POST", body_of(run, steps, cfg.metrics), JSON_HEADERS
        else:
            run = cfg.runs + (w - n_json)
            path = f"/metrics/job/soak/project/{self.project}/run/push-{w - n_json}"
            expected = cfg.metrics + 1  # and the step gauge
            url = self.servers[w % len(self.servers)].url

            def batch_of(b: int) -> tuple[list[int], str, bytes, dict]:
                return [b], "PUT", push_body_of(run, b, cfg.metrics), PUSH_HEADERS

        stats = self.stats[w]
        rng = random.Random(cfg.seed * 1_000 + w)
        with httpx.Client(base_url=url, timeout=cfg.request_timeout) as client:
            b = 0
            while time.monotonic() < self.end:
                steps, method, body, headers = batch_of(b)
                b += 1
                batch = SentBatch(run=run, steps=steps)
                stats.batches.append(batch)
                retry = None  # decided at the first failure
                pause = 0.05
                while True:
                    batch.attempts += 1
                    start = time.perf_counter()
                    try:
                        r = client.request(method, path, content=body, headers=headers)
                    except httpx.TransportError:
                        stats.failed_requests += 1
                        r = None
                    if r is not None and r.status_code == 200:
                        stats.latencies.append(time.perf_counter() - start)
                        batch.acked = True
                        doc = r.json()
                        if run >= cfg.runs:
                            self.run_ids[run] = doc.get("run_id")
                        # A retry of a batch that was stored after all replaces nothing: the values are the same.
                        if doc.get("accepted") != expected or doc.get("replaced") != 0:
                            stats.bad_answers.append(f"batch from step {steps[0]}: {doc}")
                        break
                    if r is not None:
                        (stats.http_5xx if r.status_code >= 500 else stats.http_other).append(f"{r.status_code} {r.text[:300]}")
                    if retry is None:
                        retry = rng.random() < cfg.retry_share
                    if not retry or self.killer_error is not None or time.monotonic() > self.end + 60:
                        batch.abandoned = True
                        break
                    time.sleep(pause)  # the server is down or restarting
                    pause = min(pause * 2, 0.4)
                if batch.abandoned:
                    time.sleep(0.05)

    def killer(self, start: float) -> None:
        """SIGKILL a server ``kills`` times, each after a seeded random uptime, and start it again each time.

        Uptimes average ``seconds / (kills + 1)`` and count from the moment the server answers again, so
        however slow a restart is, every kill lands on a server under load. The writers go on for
        ``TAIL_S`` after the last restart (or to the planned end, whichever is later)."""
        cfg = self.cfg
        rng = random.Random(cfg.seed)
        mean = cfg.seconds / (cfg.kills + 1)
        try:
            for _ in range(cfg.kills):
                time.sleep(mean * rng.uniform(0.3, 1.7))
                server = rng.choice(self.servers)
                server.kill()
                self.kill_times.append(time.monotonic() - start)
                t = time.perf_counter()
                server.start()
                self.restart_seconds.append(time.perf_counter() - t)
        except BaseException as exc:  # reported; the writers stop at the planned end
            self.killer_error = exc
        finally:
            self.end = max(start + cfg.seconds, time.monotonic() + TAIL_S)

    def run(self) -> float:
        """The load (and the kills); returns the seconds it took, to the last writer's end."""
        self.create_runs()
        start = time.monotonic()
        self.end = math.inf if self.cfg.kills else start + self.cfg.seconds  # the killer sets it when done
        self.run_ids += [None] * self.cfg.push_writers  # known from the first acknowledged push
        threads = [
            threading.Thread(target=self.writer, args=(w,), name=f"soak-writer-{w}")
            for w in range(self.cfg.writers + self.cfg.push_writers)
        ]
        threads += [threading.Thread(target=self.reader, args=(r,), name=f"soak-reader-{r}") for r in range(self.cfg.readers)]
        if self.cfg.kills:
            threads.append(threading.Thread(target=self.killer, args=(start,), name="soak-killer"))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.monotonic() - start


# -- check --------------------------------------------------------------------------


#: What ``check`` counts; every one but the first six must be 0.
CHECKED = (
    "acknowledged_batches", "acknowledged_points", "retried_batches", "abandoned_batches",
    "abandoned_batches_stored_whole", "stored_points",
    "lost", "wrong_values", "duplicated", "unexpected_points", "partial_batches", "latest_mismatches",
    "rollup_mismatches", "last_step_mismatches", "database_locked", "server_tracebacks",
)


def check(soak: Soak, database_url: str) -> dict:
    """Compare what the database holds with what was sent and acknowledged, one run at a time."""
    totals = dict.fromkeys(CHECKED, 0)
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            key_ids = dict(conn.execute(text("SELECT name, id FROM metric_keys")).all())
            for run, run_id in enumerate(soak.run_ids):
                batches = [b for st in soak.stats for b in st.batches if b.run == run]
                if run_id is None:  # a push run whose every push failed: nothing acknowledged, nothing to look at
                    totals["abandoned_batches"] += sum(b.abandoned for b in batches)
                    continue
                for name, n in check_run(conn, soak.cfg, run, run_id, batches, key_ids).items():
                    totals[name] += n
    finally:
        engine.dispose()
    output = "".join(server.output() for server in soak.servers)
    totals["database_locked"] = output.count(LOCKED)
    totals["server_tracebacks"] = output.count("Traceback (most recent call last)")
    return dict(totals)


def check_run(conn: Connection, cfg: SoakConfig, run: int, run_id: int, batches: list[SentBatch], key_ids: dict[str, int]) -> dict[str, int]:
    pushed = run >= cfg.runs  # a Pushgateway run: its step gauge is stored too, as metric "step"
    names = metric_names(cfg.metrics) + (["step"] if pushed else [])
    n_metrics = len(names)
    # Keys nobody sent get negative indices of their own, so that each is still counted (as unexpected).
    metric_of = {key_ids[n]: j for j, n in enumerate(names) if n in key_ids}
    q = {"r": run_id}
    points = {
        (metric_of.get(k, -k), s): (v, f)
        for k, s, v, f in conn.execute(text("SELECT key_id, step, value, nonfinite FROM points WHERE run_id = :r"), q)
    }
    duplicate_rows = conn.execute(text(
        "SELECT count(*) FROM (SELECT 1 FROM points WHERE run_id = :r GROUP BY key_id, step HAVING count(*) > 1) d"
    ), q).scalar_one()
    latest = {metric_of.get(k, -k): (s, v, f) for k, s, v, f in conn.execute(
        text("SELECT key_id, step, value, nonfinite FROM latest WHERE run_id = :r"), q
    )}
    rollups = {(metric_of.get(k, -k), lv, b): (n, lo, hi, ls) for k, lv, b, n, lo, hi, ls in conn.execute(
        text("SELECT key_id, level, block, n, vmin, vmax, last_step FROM rollups WHERE run_id = :r"), q
    )}
    last_step = conn.execute(text("SELECT last_step FROM runs WHERE id = :r"), q).scalar_one()

    def matches(j: int, step: int, got: tuple[float | None, int]) -> bool:
        want = float(step) if j == cfg.metrics else value_of(run, j, step)
        return got == (None, 1) if math.isnan(want) else got == (want, 0)

    out: dict[str, int] = defaultdict(int)
    sent: set[tuple[int, int]] = set()
    for batch in batches:
        keys = [(j, s) for s in batch.steps for j in range(n_metrics)]
        sent.update(keys)
        present = [k for k in keys if k in points]
        out["wrong_values"] += sum(not matches(*k, points[k]) for k in present)
        if batch.acked:
            out["acknowledged_batches"] += 1
            out["acknowledged_points"] += len(keys)
            out["retried_batches"] += batch.attempts > 1
            out["lost"] += len(keys) - len(present)
        elif batch.abandoned:
            out["abandoned_batches"] += 1
            out["abandoned_batches_stored_whole"] += len(present) == len(keys)
            out["partial_batches"] += 0 < len(present) < len(keys)
    out["stored_points"] = len(points)
    out["unexpected_points"] = sum(1 for k in points if k not in sent)

    # The derived tables, recomputed from the points.
    blocks: dict[tuple[int, int, int], list] = {}
    top: dict[int, tuple[int, float | None, int]] = {}
    for (j, s), (v, f) in points.items():
        if j not in top or s > top[j][0]:
            top[j] = (s, v, f)
        for level, size in ROLLUP_BLOCKS:
            agg = blocks.setdefault((j, level, s // size), [0, None, None, -1])
            agg[0] += 1
            if v is not None:
                agg[1] = v if agg[1] is None else min(agg[1], v)
                agg[2] = v if agg[2] is None else max(agg[2], v)
            agg[3] = max(agg[3], s)
    out["rollup_mismatches"] = sum(1 for key, agg in blocks.items() if rollups.get(key) != tuple(agg))
    out["rollup_mismatches"] += sum(1 for key in rollups if key not in blocks)
    counted = sum(n for (_j, level, _b), (n, *_rest) in rollups.items() if level == 1)
    out["duplicated"] = duplicate_rows + max(0, counted - len(points)) + out["unexpected_points"]
    out["latest_mismatches"] = sum(1 for j, want in top.items() if latest.get(j) != want) + sum(1 for j in latest if j not in top)
    out["last_step_mismatches"] = int(last_step != max((s for s, _v, _f in top.values()), default=None))
    return out


# -- one soak, end to end ------------------------------------------------------------


def soak(cfg: SoakConfig, workdir: Path) -> dict:
    """One soak against a server of its own on ``cfg.database_url``; the report."""
    return run_soak(cfg, workdir)[1]


def run_soak(cfg: SoakConfig, workdir: Path) -> tuple[Soak, dict]:
    servers = [ServerProcess(workdir, cfg.database_url, log_path=workdir / f"soak-server-{i}.log") for i in range(cfg.servers)]
    try:
        with ThreadPoolExecutor(len(servers)) as pool:  # together: a start is seconds of imports
            list(pool.map(ServerProcess.start, servers))
        load = Soak(cfg, servers)
        seconds = load.run()
    finally:
        for server in servers:
            server.stop()
    return load, report(load, seconds)


def report(load: Soak, seconds: float) -> dict:
    cfg = load.cfg
    found = check(load, cfg.database_url)
    latencies = [x for st in load.stats[: cfg.writers] for x in st.latencies]
    pushes = [x for st in load.stats[cfg.writers :] for x in st.latencies]
    ms = lambda q: None if not latencies else round(percentile(latencies, q) * 1000, 2)  # noqa: E731
    errors = [e for st in load.stats + load.read_stats for e in st.http_5xx + st.http_other + st.bad_answers] + load.run_errors
    reads = [x for st in load.read_stats for x in st.latencies]
    if load.killer_error is not None:
        errors.append(f"killer: {type(load.killer_error).__name__}: {load.killer_error}")
    doc = {
        "backend": make_url(cfg.database_url).get_backend_name(),
        "servers": cfg.servers,
        "writers": cfg.writers,
        "push_writers": cfg.push_writers,
        "runs": cfg.runs,
        "seconds": round(seconds, 2),
        "points_per_s": round(found["acknowledged_points"] / seconds) if seconds else None,
        "batches_per_s": round(found["acknowledged_batches"] / seconds, 1) if seconds else None,
        "points_per_batch": cfg.steps_per_batch * cfg.metrics,
        "p50_ms": ms(0.5),
        "p99_ms": ms(0.99),
        "max_ms": None if not latencies else round(max(latencies) * 1000, 2),
        "kills": len(load.kill_times),
        "restarts": len(load.restart_seconds),
        "kill_moments_s": [round(t, 2) for t in load.kill_times],
        "restart_s_max": round(max(load.restart_seconds), 2) if load.restart_seconds else None,
        "failed_requests": sum(st.failed_requests for st in load.stats),
        **found,
        "pushes": len(pushes),
        "push_p99_ms": None if not pushes else round(percentile(pushes, 0.99) * 1000, 2),
        "reads": len(reads),
        "read_p99_ms": None if not reads else round(percentile(reads, 0.99) * 1000, 2),
        "http_5xx": sum(len(st.http_5xx) for st in load.stats + load.read_stats),
        "errors": errors[:20],
        "seed": cfg.seed,
    }
    doc["ok"] = not failures(doc, cfg.kills)
    return doc


def failures(doc: dict, kills: int = 0) -> dict:
    """What went wrong in a report: each count that should be 0 and is not, errors, missing kills."""
    bad = {k: doc[k] for k in (*CHECKED[6:], "http_5xx") if doc[k]}
    if doc["errors"]:
        bad["errors"] = doc["errors"]
    if not doc["kills"] == doc["restarts"] == kills:
        bad["kills/restarts"] = (doc["kills"], doc["restarts"], f"expected {kills}")
    return bad


def soak_backend(backend: str, workdir: Path, **settings: object) -> dict:
    """``soak`` on a new SQLite file in ``workdir`` or a new PostgreSQL database."""
    if backend == "sqlite":
        return soak(SoakConfig(database_url=f"sqlite:///{workdir / 'soak.db'}", **settings), workdir)
    with fresh_postgres_database(PG_ADMIN_URL, prefix="parallax_soak") as url:
        return soak(SoakConfig(database_url=url, **settings), workdir)


# -- make soak / make bench -----------------------------------------------------------


def rows(reports: list[dict], Row: type) -> list:
    """Lines for bench.run's table: load held (points/s, concurrent writers), faults survived (kills, points lost)."""
    out = []
    for r in reports:
        where = r["backend"] + (f" ({r['servers']} processes)" if r["servers"] > 1 else "")
        clean = f"lost {r['lost']}, dup {r['duplicated']}, partial {r['partial_batches']}, locked {r['database_locked']}, 5xx {r['http_5xx']}"
        if r["kills"]:
            out.append(Row(
                f"soak {where}: {r['kills']} SIGKILLs + restarts in {r['seconds']:.0f} s, {r['writers']} writers",
                f"{r['acknowledged_points']:,} acked pts", f"{r['points_per_s']:,} pts/s", "",
                clean, r["ok"],
            ))
        else:
            out.append(Row(
                f"soak {where}: {r['writers']} concurrent writers x {r['runs']} runs, {r['seconds']:.0f} s",
                f"{r['points_per_s']:,} pts/s", f"p50 {r['p50_ms']} ms", f"p99 {r['p99_ms']} ms",
                clean, r["ok"],
            ))
    return out


def section(quick: bool = False, backends: tuple[str, ...] = ("sqlite",)) -> dict:
    """The short soak ``make bench`` runs (about 30 s): 16 concurrent writers, then writers under SIGKILLs."""
    reports = []
    for backend in backends:
        with tempfile.TemporaryDirectory(prefix="parallax-soak-") as tmp:
            reports.append(soak_backend(backend, Path(tmp), seconds=3 if quick else 6, writers=16, runs=4))
        with tempfile.TemporaryDirectory(prefix="parallax-soak-") as tmp:
            reports.append(soak_backend(backend, Path(tmp), seconds=3 if quick else 4, writers=8, runs=4, kills=1 if quick else 2))
    return {"reports": reports, "met": all(r["ok"] for r in reports)}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgresql"], help="repeatable (default: both)")
    parser.add_argument("--seconds", type=float, default=60.0, help="length of each soak (default 60)")
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--kills", type=int, default=8, help="SIGKILLs in the fault soak (default 8)")
    parser.add_argument("--fault-writers", type=int, default=8, help="writers of the fault soak (default 8)")
    parser.add_argument("--push-writers", type=int, default=2, help="extra writers pushing through the Pushgateway route (default 2)")
    parser.add_argument("--pg-servers", type=int, default=2, help="parallax processes sharing the PostgreSQL database (default 2)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, default=Path(__file__).resolve().parent / "results" / "soak.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from bench.run import Report, machine_info, print_table, Row

    args = parse_args(argv)
    reports = []
    for backend in args.backend or ["sqlite", "postgresql"]:
        for kills, writers in ((0, args.writers), (args.kills, args.fault_writers)):
            with tempfile.TemporaryDirectory(prefix="parallax-soak-") as tmp:
                print(f"[soak] {backend}: {writers} writers x {args.runs} runs, {args.seconds:.0f} s, {kills} kills", file=sys.stderr, flush=True)
                try:
                    servers = args.pg_servers if backend == "postgresql" else 1
                    r = soak_backend(backend, Path(tmp), seconds=args.seconds, writers=writers, runs=args.runs, kills=kills, seed=args.seed, servers=servers, push_writers=args.push_writers)
                except OperationalError as exc:
                    print(f"soak: FAILED: cannot reach PostgreSQL at {PG_ADMIN_URL} ({exc.orig}); set "
                          "PARALLAX_TEST_POSTGRES_URL or pass --backend sqlite", file=sys.stderr)
                    return 1
                print(f"[soak] {json.dumps({k: r[k] for k in ('points_per_s', 'p99_ms', 'kills', 'lost', 'duplicated', 'partial_batches', 'ok')})}", file=sys.stderr, flush=True)
                reports.append(r)
    document = {
        "benchmark": "parallax bench.soak",
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "quick": False,
        "machine": machine_info(),
        "soak": reports,
        "summary": summary(reports),
        "all_met": all(r["ok"] for r in reports),
    }
    text_doc = json.dumps(document, indent=2)
    print(text_doc)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(text_doc + "\n")
    report = Report(document=document, rows=rows(reports, Row))
    print_table(report, title="Parallax soak", columns=("measure", "value", "rate / p50", "p99", "checks", "ok"))
    return 0 if document["all_met"] else 1


def summary(reports: list[dict]) -> dict:
    """What the issue asks the report to say: load held, faults survived."""
    load = [r for r in reports if not r["kills"]]
    faults = [r for r in reports if r["kills"]]
    return {
        "load_held": {r["backend"]: {"points_per_s": r["points_per_s"], "concurrent_writers": r["writers"] + r["push_writers"], "server_processes": r["servers"], "runs": r["runs"], "p99_ms": r["p99_ms"]} for r in load},
        "faults_survived": {r["backend"]: {"kills": r["kills"], "restarts": r["restarts"], "points_lost": r["lost"], "duplicated": r["duplicated"], "partial_batches": r["partial_batches"], "acknowledged_points": r["acknowledged_points"]} for r in faults},
    }


if __name__ == "__main__":
    sys.exit(main())
