"""Database size per million points, and retention's deletion; called by bench.run (``make bench``).

    .venv/bin/python -m bench.size [--quick]

(m) 1,000,000 points (10 runs x 20 metrics x 5,000 steps, random values,
    trainer times with a fractional part) written through the store in batches
    of 100 steps into a fresh SQLite file; the WAL is checkpointed and the
    file measured: MB per million points, target <= 40 (with the per-table
    split from SQLite's dbstat). The same load into PostgreSQL (a database of
    its own on PARALLAX_BENCH_POSTGRES_URL, else PARALLAX_TEST_POSTGRES_URL, else
    127.0.0.1:5432 as `make soak` uses; skipped, saying why, when none answers)
    is reported for information: pg_total_relation_size of the tables, on a
    fifth of the load (1,000 steps per run; the size grows linearly) so the
    bench stays short.
(n) Retention deleting those points again (all runs finished and old): points/s
    and the longest chunk, which is the longest an ingest batch can wait
    behind the deletion on SQLite's single writer.
"""

from __future__ import annotations

import os
import random
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from parallax.ingest.points import Batch
from parallax.server.app import open_store
from parallax.server.config import Settings
from parallax.server.retention import CHUNK_POINTS, DAY, RetentionService

RUNS, METRICS, STEPS, BATCH_STEPS = 10, 20, 5_000, 100
QUICK_STEPS = 1_000
POSTGRES_STEPS = 1_000
T0 = 1_764_000_000.0
TARGET_MB_PER_MILLION = 40.0
TABLES = ("points", "rollups", "latest")


def load(store: Any, steps: int, seed: int = 1) -> tuple[int, float]:
    """Write the workload; (points written, seconds)."""
    rng = random.Random(seed)
    names = [f"metric_{i:02d}" for i in range(METRICS)]
    written = 0
    start = time.perf_counter()
    for r in range(RUNS):
        run_id = store.create_run("bench-size", f"run-{r}", {}, [])[0].id
        for first in range(0, steps, BATCH_STEPS):
            last = min(first + BATCH_STEPS, steps) - 1
            times = [T0 + s * 7.3 + rng.random() for s in range(first, last + 1)]
            groups = {n: [(s, rng.gauss(0, 1), 0, times[s - first]) for s in range(first, last + 1)] for n in names}
            n = (last - first + 1) * METRICS
            store.write_points(run_id, Batch(groups, n, 0, (first, last)), now=T0)
            written += n
        store.update_run(run_id, status="finished")
    return written, time.perf_counter() - start


def purge(store: Any) -> dict:
    """Retention deletes every point written by ``load`` (each run finished, silent since T0)."""
    service = RetentionService(store, SimpleNamespace(retention_days=1.0, retention_interval_seconds=3600.0))
    real = store.purge_points_chunk
    chunk_seconds: list[float] = []

    def timed(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            chunk_seconds.append(time.perf_counter() - t)

    store.purge_points_chunk = timed
    start = time.perf_counter()
    deleted = service.sweep(now=T0 + 2 * DAY)
    seconds = time.perf_counter() - start
    del store.purge_points_chunk
    return {
        "deleted_points": deleted,
        "seconds": seconds,
        "points_per_s": deleted / seconds if seconds else 0.0,
        "chunk_points": CHUNK_POINTS,
        "chunks": len(chunk_seconds),
        "chunk_ms_max": max(chunk_seconds, default=0.0) * 1e3,
        "chunk_ms_mean": sum(chunk_seconds) / len(chunk_seconds) * 1e3 if chunk_seconds else 0.0,
    }


def measure_sqlite(steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="parallax-size-") as tmp:
        path = Path(tmp) / "size.db"
        store = open_store(Settings(database_url=f"sqlite:///{path}"))
        try:
            points, seconds = load(store, steps)
        finally:
            store.close()
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            page = conn.execute("PRAGMA page_size").fetchone()[0]
            try:
                tables = {name: size for name, size in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name")}
            except sqlite3.OperationalError:  # a SQLite built without the dbstat table
                tables = {}
        size = path.stat().st_size
        store = open_store(Settings(database_url=f"sqlite:///{path}"))
        try:
            deletion = purge(store)
        finally:
            store.close()
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            free = conn.execute("PRAGMA freelist_count").fetchone()[0] * page
        deletion["file_bytes_after"] = path.stat().st_size
        deletion["free_bytes_after"] = free  # reused by later writes; VACUUM gives them back to the file system
    mb = size / 1e6 / (points / 1e6)
    return {
        "points": points,
        "write_seconds": seconds,
        "file_bytes": size,
        "mb_per_million_points": mb,
        "table_bytes": {t: tables.get(t, 0) for t in TABLES},
        "page_size": page,
        "retention": deletion,
        "target_mb_per_million_max": TARGET_MB_PER_MILLION,
        "met": mb <= TARGET_MB_PER_MILLION,
    }


#: Where the PostgreSQL figure is measured when no variable names a server (as `make soak` does); skipped, with the
#: reason in the report, when nothing answers there.
DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def postgres_admin_url() -> str | None:
    return (os.environ.get("PARALLAX_BENCH_POSTGRES_URL") or os.environ.get("PARALLAX_TEST_POSTGRES_URL")
            or DEFAULT_POSTGRES_URL)


def measure_postgres(steps: int) -> dict:
    from sqlalchemy import create_engine, make_url, text

    admin_url = postgres_admin_url()
    if not admin_url:
        return {"skipped": "set PARALLAX_BENCH_POSTGRES_URL to measure PostgreSQL"}
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    name = f"parallax_bench_size_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # the SQLite figure is the target; PostgreSQL is information
        admin.dispose()
        return {"skipped": f"PostgreSQL not reachable at {make_url(admin_url).render_as_string()} ({type(exc).__name__}); "
                           "set PARALLAX_BENCH_POSTGRES_URL"}
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        store = open_store(Settings(database_url=url))
        try:
            points, seconds = load(store, steps)
            with store.engine.connect() as conn:
                tables = {
                    t: conn.execute(text("SELECT pg_total_relation_size(:t)"), {"t": t}).scalar_one() for t in TABLES
                }
                database = conn.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
            deletion = purge(store)
        finally:
            store.close()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    return {
        "points": points,
        "write_seconds": seconds,
        "table_bytes": tables,
        "mb_per_million_points": sum(tables.values()) / 1e6 / (points / 1e6),
        "database_bytes": database,
        "retention": deletion,
    }


def measure(quick: bool = False) -> dict:
    steps = QUICK_STEPS if quick else STEPS
    sqlite_doc = measure_sqlite(steps)
    return {
        "workload": {"runs": RUNS, "metrics": METRICS, "steps": steps, "batch_steps": BATCH_STEPS},
        "sqlite": sqlite_doc,
        "postgresql": measure_postgres(min(steps, POSTGRES_STEPS)),
        "met": sqlite_doc["met"],
    }


def rows(doc: dict, Row: type) -> list:
    """Lines for bench.run's table."""
    lite, pg = doc["sqlite"], doc["postgresql"]
    out = [
        Row(f"SQLite size, {lite['points']:,} pts", f"{lite['mb_per_million_points']:.1f} MB/M pts",
            f"points {lite['table_bytes']['points'] / 1e6:.1f} MB", target=f"≤ {TARGET_MB_PER_MILLION:.0f} MB/M",
            met=lite["met"]),
        Row("retention delete, SQLite", f"{lite['retention']['points_per_s']:,.0f} pts/s",
            f"chunk max {lite['retention']['chunk_ms_max']:.1f} ms"),
    ]
    if "skipped" in pg:
        out.append(Row("PostgreSQL size", "skipped", pg["skipped"]))
    else:
        out += [
            Row(f"PostgreSQL size, {pg['points']:,} pts", f"{pg['mb_per_million_points']:.1f} MB/M pts",
                f"points {pg['table_bytes']['points'] / 1e6:.1f} MB"),
            Row("retention delete, PostgreSQL", f"{pg['retention']['points_per_s']:,.0f} pts/s",
                f"chunk max {pg['retention']['chunk_ms_max']:.1f} ms"),
        ]
    return out


if __name__ == "__main__":
    import json

    print(json.dumps(measure(quick="--quick" in sys.argv), indent=2))
