"""The SQLite single writer: queued jobs share a commit, and a failing job rolls back alone."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import text

from parallax.server.store.sql import make_engine
from parallax.server.store.writer import SerialWriter


@pytest.fixture
def writer(sqlite_url):
    engine = make_engine(sqlite_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)"))
    w = SerialWriter(engine)
    yield w, engine
    w.close()
    engine.dispose()


def test_queued_jobs_are_grouped_and_a_failure_stays_alone(writer):
    w, engine = writer
    gate, running = threading.Event(), threading.Event()
    groups_seen = []

    def slow_first(conn):
        running.set()
        gate.wait(10)  # the others queue up behind this one
        conn.execute(text("INSERT INTO t VALUES (0, 'first')"))
        return "first"

    def insert(k):
        def job(conn):
            groups_seen.append(conn.in_nested_transaction())
            conn.execute(text("INSERT INTO t VALUES (:k, 'x')"), {"k": k})
            if k == 5:
                conn.execute(text("INSERT INTO t VALUES (:k, NULL)"), {"k": 1000 + k})  # NOT NULL: fails
            return k
        return job

    with ThreadPoolExecutor(12) as pool:
        first = pool.submit(w.run, slow_first)
        assert running.wait(10)
        futures = {k: pool.submit(w.run, insert(k)) for k in range(1, 11)}
        deadline = time.monotonic() + 10
        while w._jobs.qsize() < 10 and time.monotonic() < deadline:
            time.sleep(0.01)
        gate.set()
        assert first.result(10) == "first"
        for k, fut in futures.items():
            if k == 5:
                with pytest.raises(Exception, match="NOT NULL"):
                    fut.result(10)
            else:
                assert fut.result(10) == k
    assert any(groups_seen), "queued jobs ran inside savepoints of a shared transaction"
    with engine.connect() as conn:
        keys = [r[0] for r in conn.execute(text("SELECT k FROM t ORDER BY k"))]
    assert keys == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]


def test_a_lone_failing_job_leaves_nothing(writer):
    w, engine = writer

    def job(conn):
        conn.execute(text("INSERT INTO t VALUES (1, 'a')"))
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        w.run(job)
    assert w.run(lambda conn: conn.execute(text("SELECT count(*) FROM t")).scalar_one()) == 0


def test_closed_writer_refuses_jobs(writer):
    w, _ = writer
    w.close()
    with pytest.raises(RuntimeError, match="closed"):
        w.run(lambda conn: None)
