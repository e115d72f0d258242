"""Fixtures: every store test runs on SQLite and on the PostgreSQL at PARALLAX_TEST_POSTGRES_URL.

The suite creates a database of its own on that server for the session and
drops it at the end. PostgreSQL tests fail, never skip, when the server is not
reachable (set PARALLAX_TEST_POSTGRES=skip to leave them out on purpose).
"""

from __future__ import annotations

import os
from typing import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from starlette.testclient import TestClient

from parallax.ingest.points import Batch
from parallax.server.app import create_app, open_store
from parallax.server.config import Settings
from parallax.server.store.sql import SqlStore
from tests.servers import fresh_postgres_database

PG_ADMIN_URL = os.environ.get("PARALLAX_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
BACKENDS = ["sqlite", "postgresql"]


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    if os.environ.get("PARALLAX_TEST_POSTGRES") == "skip":
        pytest.skip("PARALLAX_TEST_POSTGRES=skip")
    database = fresh_postgres_database(PG_ADMIN_URL, prefix="parallax_test")
    try:
        url = database.__enter__()
    except OperationalError as exc:
        pytest.fail(
            f"PostgreSQL at {PG_ADMIN_URL} is not reachable ({exc.orig}); start it, point "
            "PARALLAX_TEST_POSTGRES_URL at one, or set PARALLAX_TEST_POSTGRES=skip"
        )
    try:
        yield url
    finally:
        database.__exit__(None, None, None)  # dropped at the end of the session


def reset_postgres(url: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


@pytest.fixture(params=BACKENDS)
def db_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """An empty database on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/parallax.db"
    url = request.getfixturevalue("pg_url")
    reset_postgres(url)
    return url


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path}/parallax.db"


@pytest.fixture
def store(db_url: str) -> Iterator[SqlStore]:
    s = open_store(Settings(database_url=db_url))
    yield s
    s.close()


def write(store: SqlStore, run_id: int, rows: list[tuple], now: float | None = None):
    """Store already-valid rows ``(name, step, value, nonfinite, time)``."""
    return store.write_points(run_id, Batch.of(rows), now=now)


#: The Host header of Starlette's and schemathesis's in-process clients: a name the server is told it has.
TEST_HOSTS = ["testserver"]


def make_client(**settings: object) -> TestClient:
    settings.setdefault("allowed_hosts", TEST_HOSTS)
    return TestClient(create_app(Settings(**settings)))


@pytest.fixture
def client(db_url: str) -> Iterator[TestClient]:
    with make_client(database_url=db_url) as c:
        yield c


@pytest.fixture
def sqlite_client(sqlite_url: str) -> Iterator[TestClient]:
    with make_client(database_url=sqlite_url) as c:
        yield c


def new_run(client: TestClient, name: str = "run-1", **extra: object) -> int:
    r = client.post("/api/v1/runs", json={"project": "proj", "name": name, **extra})
    assert r.status_code in (200, 201), r.text
    return r.json()["id"]


# -- running in parallel ---------------------------------------------------------------------------------------------
# `make test` runs the suite on two pytest-xdist workers with --dist loadfile: each test module runs whole on one
# worker, in its order, as it does alone (its module-scoped servers, browser, real Prometheus set up once there).
# Each worker has its own PostgreSQL database (pg_url), temporary folders and free ports.

#: The modules that take longest (a minute or so each on an idle two-core machine, down to about 20 s), handed out
#: first (the Makefile passes --no-loadscope-reorder): a worker left alone with one of them at the end would keep the
#: whole suite waiting. The others follow in collection order. Only the order of whole modules changes, and only
#: under xdist.
SLOW_MODULES_FIRST = (
    "test_prometheus_real.py", "test_packaging.py", "test_fuzz_api.py", "test_dashboard_browser.py",
    "test_suite_toyrl.py", "test_demo.py", "test_client.py", "test_leader.py", "test_trl_run.py",
    "test_remote_write.py", "test_importers.py", "test_crash.py", "test_concurrency.py",
)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if hasattr(config, "workerinput"):  # on an xdist worker (every worker sorts the same collection alike)
        rank = {name: i for i, name in enumerate(SLOW_MODULES_FIRST)}
        items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each module's order is kept


# The fuzz report (tests/fuzz_report.py) adds up what every worker tried.


def pytest_sessionfinish(session: pytest.Session) -> None:
    from tests import fuzz_report

    if hasattr(session.config, "workerinput"):
        fuzz_report.worker_done(session.config)
    else:
        fuzz_report.write_merged()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    from tests import fuzz_report

    fuzz_report.worker_down(getattr(node, "workeroutput", {}))
