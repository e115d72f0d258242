"""/healthz reports a store that cannot write, and a write the store cannot take is a JSON 507 or 503, never a
plain-text 500 (which also dropped the client's connection)."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy.exc import OperationalError

from parallax.server.store.health import storage_failure
from tests.conftest import make_client, new_run


def pragma(store, statement: str) -> None:
    """Runs on the SQLite writer's own connection (the one every write goes through)."""
    store._write(lambda conn: conn.exec_driver_sql(statement))


def big_batch(start: int, n: int = 200) -> dict:
    return {"points": [{"step": s, "metrics": {f"m{i}": float(s) for i in range(50)}} for s in range(start, start + n)]}


def test_a_full_disk_is_a_json_507_and_healthz_says_the_store_cannot_write(sqlite_url):
    with make_client(database_url=sqlite_url, alert_timer_seconds=0, write_probe_seconds=3600) as c:
        run = new_run(c)
        store = c.app.state.store
        assert c.get("/healthz").json()["database"]["writable"] is True
        with store.engine.connect() as conn:
            pages = conn.exec_driver_sql("PRAGMA page_count").scalar()
        pragma(store, f"PRAGMA max_page_count = {pages}")  # SQLite's own "database or disk is full" past it
        r = c.post(f"/api/v1/runs/{run}/metrics", json=big_batch(0))  # an escaped exception would raise here
        assert r.status_code == 507 and r.headers["content-type"] == "application/json"
        assert "disk is full" in r.json()["detail"][0]["msg"] and r.headers["retry-after"]
        h = c.get("/healthz")
        assert h.status_code == 503
        assert h.json()["status"] == "unhealthy"
        database = h.json()["database"]
        assert (database["reachable"], database["writable"], database["write_error"]) == (
            True, False, "the database's disk is full")
        assert c.get(f"/api/v1/runs/{run}").status_code == 200  # reads go on
        pragma(store, "PRAGMA max_page_count = 1073741823")  # room again
        assert c.post(f"/api/v1/runs/{run}/metrics", json=big_batch(0)).status_code == 200
        assert c.get("/healthz").status_code == 200


def test_healthz_probes_a_store_no_write_reached_lately(sqlite_url):
    with make_client(database_url=sqlite_url, alert_timer_seconds=0, write_probe_seconds=0) as c:
        run = new_run(c)
        store = c.app.state.store
        pragma(store, "PRAGMA query_only = ON")  # as a read-only database
        h = c.get("/healthz")
        assert h.status_code == 503 and h.json()["database"]["write_error"] == "the database is read-only"
        r = c.post(f"/api/v1/runs/{run}/metrics", json=big_batch(0, 1))
        assert r.status_code == 503 and r.json()["detail"][0]["type"] == "store_unavailable"
        pragma(store, "PRAGMA query_only = OFF")
        assert c.get("/healthz").status_code == 200  # the probe sees it can write again, with no write in between


def _sqlite_error(statement: str, setup: list[str]) -> OperationalError:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    for s in setup:
        conn.execute(s)
    try:
        conn.execute(statement)
    except sqlite3.OperationalError as exc:
        return OperationalError(statement, {}, exc)
    finally:
        conn.close()
    raise AssertionError("no error")


class _PgError(Exception):
    def __init__(self, sqlstate: str):
        super().__init__(f"pg {sqlstate}")
        self.sqlstate = sqlstate


@pytest.mark.parametrize("exc, full, reason", [
    (lambda: _sqlite_error("INSERT INTO t VALUES (randomblob(100000))",
                           ["CREATE TABLE t (x)", "PRAGMA max_page_count = 2"]), True, "the database's disk is full"),
    (lambda: _sqlite_error("INSERT INTO t VALUES (1)", ["CREATE TABLE t (x)", "PRAGMA query_only = 1"]),
     False, "the database is read-only"),
    (lambda: OperationalError("x", {}, _PgError("53100")), True, "the database's disk is full"),
    (lambda: OperationalError("x", {}, _PgError("25006")), False, "the database is read-only"),
    (lambda: OperationalError("x", {}, _PgError("08006")), False, "the database is not available"),
])
def test_storage_failures_are_told_apart(exc, full, reason):
    found = storage_failure(exc())
    assert (found.full, found.reason) == (full, reason)


def test_what_is_the_requests_fault_is_not_a_storage_failure():
    from sqlalchemy.exc import DataError, IntegrityError

    assert storage_failure(IntegrityError("x", {}, Exception("UNIQUE"))) is None
    assert storage_failure(DataError("x", {}, Exception("NUL"))) is None
    assert storage_failure(OperationalError("x", {}, _PgError("40P01"))) is None  # a deadlock, retried
    assert storage_failure(ValueError("x")) is None
