"""Migrations and models agree; an older schema is refused with its one-line fix."""

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text

from parallax.server.app import open_store
from parallax.server.cli import main
from parallax.server.config import Settings
from parallax.server.migrate import SchemaOutOfDate, current_revision, head_revision, upgrade
from parallax.server.store.schema import metadata
from parallax.server.store.sql import make_engine


def test_migrations_match_the_models(db_url):
    engine = make_engine(db_url)
    upgrade(engine)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), metadata)
    engine.dispose()
    assert diff == []


def test_new_database_is_created_at_head(db_url):
    store = open_store(Settings(database_url=db_url))
    try:
        assert current_revision(store.engine) == head_revision()
    finally:
        store.close()


def test_older_schema_is_refused_then_upgraded_keeping_data(db_url, capsys):
    engine = make_engine(db_url)
    upgrade(engine, "0001")
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO runs (project, name, config, tags, notes, status, created_at) "
            "VALUES ('p', 'old', '{}', '[]', '', 'running', 1.0)"
        ))
    engine.dispose()
    with pytest.raises(SchemaOutOfDate) as err:
        open_store(Settings(database_url=db_url))
    assert "run `parallax db upgrade`" in str(err.value) and "\n" not in str(err.value)
    assert main(["db", "current", "--database-url", db_url]) == 3
    assert main(["db", "upgrade", "--database-url", db_url]) == 0
    assert f"0001 -> {head_revision()}" in capsys.readouterr().out
    store = open_store(Settings(database_url=db_url))
    try:
        assert [r.name for r in store.list_runs()] == ["old"]
        assert store.add_events(store.list_runs()[0].id, [(1, "note", "", 1.0)]) == 1
    finally:
        store.close()
    assert main(["db", "current", "--database-url", db_url]) == 0


def test_server_refuses_an_old_schema_with_the_fix(sqlite_url, capsys):
    engine = make_engine(sqlite_url)
    upgrade(engine, "0001")
    engine.dispose()
    assert main(["serve", "--database-url", sqlite_url, "--port", "8998"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "parallax db upgrade" in err


def test_processes_starting_together_create_the_schema_once(db_url):
    """Several servers opening one empty database at once (DESIGN §7): one creates it, the others wait and find it at
    head. On SQLite a deferred transaction's upgrade to a writer, and the switch to WAL mode, are refused at once
    while another connection writes ("database is locked"): four threads failed on every one of 20 new files."""
    import threading

    errors, stores = [], []

    def start():
        try:
            stores.append(open_store(Settings(database_url=db_url)))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == [] and len(stores) == 4
        assert {current_revision(s.engine) for s in stores} == {head_revision()}
    finally:
        for s in stores:
            s.close()
